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
#include <vector>

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

// Controller to agent, once every agent has proven the key: who is in the job, so that the agents
// connect to each other. `names` and `addresses` ("HOST:PORT") list every agent in the job's order;
// `you` is the receiver's own name among them. An agent dials those after it in the order and
// accepts those before it.
struct Join {
  static constexpr std::uint8_t type = 0x10;
  static constexpr std::string_view name = "JOIN";
  std::string you;
  std::vector<std::string> names;
  std::vector<std::string> addresses;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("you", m.you, name_bytes_max);
    f.field("names", m.names, agents_max, name_bytes_max);
    f.field("addresses", m.addresses, agents_max, name_bytes_max);
  }
  friend bool operator==(const Join&, const Join&) = default;
};

// Agent to controller: connected to every other agent of the job; its host's arch and memory.
struct Ready {
  static constexpr std::uint8_t type = 0x11;
  static constexpr std::string_view name = "READY";
  std::string host_arch;
  std::uint64_t host_budget = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("host_arch", m.host_arch, name_bytes_max);
    f.field("host_budget", m.host_budget);
  }
  friend bool operator==(const Ready&, const Ready&) = default;
};

// Controller to agent: an empty submission to the agent's host, reached once the agent has applied
// every message before it. The agent answers REACHED with the same value.
struct Mark {
  static constexpr std::uint8_t type = 0x12;
  static constexpr std::string_view name = "MARK";
  std::uint64_t value = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("value", m.value);
  }
  friend bool operator==(const Mark&, const Mark&) = default;
};

// Agent to controller: the host's timeline has reached `value`.
struct Reached {
  static constexpr std::uint8_t type = 0x13;
  static constexpr std::string_view name = "REACHED";
  std::uint64_t value = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("value", m.value);
  }
  friend bool operator==(const Reached&, const Reached&) = default;
};

using Message = std::variant<Heartbeat, Abort, Close, Closed, Join, Ready, Mark, Reached>;

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
