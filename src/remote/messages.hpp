// The messages that follow the handshake on a job's connection: one struct per message, and the
// table (Message) that the frame decoder and the codec read their types and names from.
//
// Adding a message: write its struct here (a unique type byte, its NAME as errors and docs show it,
// its fields in wire order through fields()), add it to Message, and document it in
// docs/protocol.md. The codec encodes and decodes it from fields() alone.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "remote/limits.hpp"

namespace rig::remote {

// fields(m, f) names each field to a visitor f, in wire order:
//   f.field("name", m.some_u8_u32_or_u64);
//   f.field("name", m.some_string, limit_in_bytes);
// The same function serves encoding (m const) and decoding, so the two cannot disagree.

// Sent when nothing else has been for a while, so that the peer knows this end is alive.
struct Heartbeat {
  static constexpr std::uint8_t type = 0x01;
  static constexpr std::string_view name = "HEARTBEAT";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// The sender's job has failed; `reason` is its root cause. The receiver records "NAME aborted:
// WHY".
struct Abort {
  static constexpr std::uint8_t type = 0x02;
  static constexpr std::string_view name = "ABORT";
  std::string reason;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("reason", m.reason, reason_bytes_max);
  }
  friend bool operator==(const Abort&, const Abort&) = default;
};

// The controller ends the job in order: the agent releases what the job holds and stops serving.
struct Close {
  static constexpr std::uint8_t type = 0x03;
  static constexpr std::string_view name = "CLOSE";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const Close&, const Close&) = default;
};

// The agent's answer to CLOSE: it has released the job and stopped listening.
struct Closed {
  static constexpr std::uint8_t type = 0x04;
  static constexpr std::string_view name = "CLOSED";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const Closed&, const Closed&) = default;
};

using Message = std::variant<Heartbeat, Abort, Close, Closed>;

namespace detail {

template <typename V>
struct MessageTable;

template <typename... Ms>
struct MessageTable<std::variant<Ms...>> {
  static constexpr std::array<std::uint8_t, sizeof...(Ms)> types{Ms::type...};
  static constexpr std::array<std::string_view, sizeof...(Ms)> names{Ms::name...};
};

using Table = MessageTable<Message>;

constexpr bool types_unique_and_nonzero() {
  for (std::size_t i = 0; i < Table::types.size(); ++i) {
    if (Table::types[i] == 0) return false;
    for (std::size_t j = i + 1; j < Table::types.size(); ++j)
      if (Table::types[i] == Table::types[j]) return false;
  }
  return true;
}
// Type 0 stays unused so that a zeroed buffer never reads as a message.
static_assert(types_unique_and_nonzero(), "every message needs its own nonzero type byte");

}  // namespace detail

// The NAME of the message with this type byte; empty for a type no message has.
constexpr std::string_view message_name(std::uint8_t type) noexcept {
  for (std::size_t i = 0; i < detail::Table::types.size(); ++i)
    if (detail::Table::types[i] == type) return detail::Table::names[i];
  return {};
}

}  // namespace rig::remote
