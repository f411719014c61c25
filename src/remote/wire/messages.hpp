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

#include "core/pool.hpp"
#include "remote/limits.hpp"

namespace rig::remote {

// fields(m, f) names each field to a visitor f, in wire order:
//   f.field("name", m.some_u8_u32_or_u64);
//   f.field("name", m.some_string, limit_in_bytes);
//   f.text("name", m.some_string, limit_in_bytes);  // text for people: a reason, a device's name
// A text field is printable ASCII as sent (a process escapes its peers' bytes in what it sends);
// the decoder escapes one that is not (printable_once), so it is safe to log or print as it is.
// Names that are matched against each other (JOIN's, OPEN's kind, a run's entry) stay fields.
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
    f.text("reason", m.reason, reason_bytes_max);
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
    f.text("host_arch", m.host_arch, name_bytes_max);
    f.field("host_budget", m.host_budget);
  }
  friend bool operator==(const Ready&, const Ready&) = default;
};

// Agent to controller: the agent's device `device` (0: its host) has done the work of `value` of
// that device's timeline, and every copy of that work into the controller's memory has come back
// before it, in DATA frames.
struct Reached {
  static constexpr std::uint8_t type = 0x13;
  static constexpr std::string_view name = "REACHED";
  std::uint32_t device = 0;
  std::uint64_t value = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("device", m.device);
    f.field("value", m.value);
  }
  friend bool operator==(const Reached&, const Reached&) = default;
};

// Controller to agent: open the agent's devices of `kind` (its opener runs at the first OPEN of a
// kind; a later one gives the same devices). Answered by OPENED.
struct Open {
  static constexpr std::uint8_t type = 0x20;
  static constexpr std::string_view name = "OPEN";
  std::string kind;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("kind", m.kind, name_bytes_max);
  }
  friend bool operator==(const Open&, const Open&) = default;
};

// One device in OPENED: its id for later messages (never 0, the host's), as the agent opened it.
struct WireDevice {
  std::uint32_t id = 0;
  std::string name;  // the agent's own name for it, "SIM:0"
  std::string arch;
  std::uint64_t budget = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("id", m.id);
    f.text("name", m.name, name_bytes_max);
    f.text("arch", m.arch, name_bytes_max);
    f.field("budget", m.budget);
  }
  friend bool operator==(const WireDevice&, const WireDevice&) = default;
};

// That work on device `from` may use memory of device `to` (ids as in OPENED; 0 is the host).
struct WireReach {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("from", m.from);
    f.field("to", m.to);
  }
  friend bool operator==(const WireReach&, const WireReach&) = default;
};

// Agent to controller, the answer to OPEN: the devices, or why there are none (`why` not empty).
// `reaches` lists every pair among the agent's open devices and its host that reach each other
// and involve a device of this answer.
struct Opened {
  static constexpr std::uint8_t type = 0x21;
  static constexpr std::string_view name = "OPENED";
  std::string why;
  std::vector<WireDevice> devices;
  std::vector<WireReach> reaches;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.text("why", m.why, reason_bytes_max);
    f.field("devices", m.devices, wire_devices_max);
    f.field("reaches", m.reaches, wire_reaches_max);
  }
  friend bool operator==(const Opened&, const Opened&) = default;
};

// Controller to agent: a buffer of `bytes` on `device`. Answered by MADE.
struct Make {
  static constexpr std::uint8_t type = 0x22;
  static constexpr std::string_view name = "MAKE";
  std::uint32_t device = 0;
  std::uint64_t bytes = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("device", m.device);
    f.field("bytes", m.bytes);
  }
  friend bool operator==(const Make&, const Make&) = default;
};

// Agent to controller, the answer to MAKE: the buffer's id (never 0), or 0 and why not (the
// agent's out-of-memory text).
struct Made {
  static constexpr std::uint8_t type = 0x23;
  static constexpr std::string_view name = "MADE";
  std::uint64_t memory = 0;
  std::string why;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("memory", m.memory);
    f.text("why", m.why, reason_bytes_max);
  }
  friend bool operator==(const Made&, const Made&) = default;
};

// Controller to agent: the controller holds buffer `memory` no more; the agent lets go of it.
struct Free {
  static constexpr std::uint8_t type = 0x24;
  static constexpr std::string_view name = "FREE";
  std::uint64_t memory = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("memory", m.memory);
  }
  friend bool operator==(const Free&, const Free&) = default;
};

// Controller to agent: load a rig.program of `bytes` bytes on `device`; the program follows in
// PAYLOAD frames. Answered by LOADED.
struct Load {
  static constexpr std::uint8_t type = 0x25;
  static constexpr std::string_view name = "LOAD";
  std::uint32_t device = 0;
  std::uint64_t bytes = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("device", m.device);
    f.field("bytes", m.bytes);
  }
  friend bool operator==(const Load&, const Load&) = default;
};

// Agent to controller, the answer to LOAD: the image's id (never 0), or 0 and why not.
struct Loaded {
  static constexpr std::uint8_t type = 0x26;
  static constexpr std::string_view name = "LOADED";
  std::uint64_t image = 0;
  std::string why;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("image", m.image);
    f.text("why", m.why, reason_bytes_max);
  }
  friend bool operator==(const Loaded&, const Loaded&) = default;
};

// Controller to agent: the controller holds image `image` no more.
struct Unload {
  static constexpr std::uint8_t type = 0x27;
  static constexpr std::string_view name = "UNLOAD";
  std::uint64_t image = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("image", m.image);
  }
  friend bool operator==(const Unload&, const Unload&) = default;
};

// A run's argument: a plain word (memory 0), or the address of buffer `memory` plus `offset`,
// which the run reads (access 0), writes (1) or both (2), or (access 3, `rail`) the address of the
// agent's rig_rail record of rail `memory`.
struct WireArg {
  static constexpr std::uint8_t rail = 3;
  std::uint64_t word = 0;
  std::uint64_t memory = 0;
  std::uint64_t offset = 0;
  std::uint8_t access = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("word", m.word);
    f.field("memory", m.memory);
    f.field("offset", m.offset);
    f.field("access", m.access);
  }
  friend bool operator==(const WireArg&, const WireArg&) = default;
};

// One part of a SUBMIT. A copy (kind 1) moves `bytes` from `src` at `src_offset` to `dst` at
// `dst_offset`; memory 0 is the controller's own: a copy from it carries its bytes in the PAYLOAD
// frames after the SUBMIT, a copy into it sends them back in DATA frames. A run (kind 2) runs
// `entry` of `image` with `shape` (grid x y z, block x y z) and `args`.
struct WirePart {
  static constexpr std::uint8_t copy = 1;
  static constexpr std::uint8_t run = 2;
  std::uint8_t kind = 0;
  std::uint64_t dst = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t src = 0;
  std::uint64_t src_offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t image = 0;
  rig::detail::PoolString entry;
  std::uint32_t shape[6] = {1, 1, 1, 1, 1, 1};
  rig::detail::PoolVector<WireArg> args;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("kind", m.kind);
    f.field("dst", m.dst);
    f.field("dst_offset", m.dst_offset);
    f.field("src", m.src);
    f.field("src_offset", m.src_offset);
    f.field("bytes", m.bytes);
    f.field("image", m.image);
    f.field("entry", m.entry, name_bytes_max);
    for (auto& v : m.shape) f.field("shape", v);
    f.field("args", m.args, wire_args_max);
  }
  friend bool operator==(const WirePart&, const WirePart&) = default;
};

// Controller to agent: one submission to `device` (0: the host), whose work reaches `value` of
// that device's timeline. The agent applies it after every message before it and answers REACHED
// once it is done (after the DATA of its copies into the controller's memory).
struct Submit {
  static constexpr std::uint8_t type = 0x28;
  static constexpr std::string_view name = "SUBMIT";
  std::uint32_t device = 0;
  std::uint64_t value = 0;
  rig::detail::PoolVector<WirePart> parts;  // a submission may be made in a signal handler
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("device", m.device);
    f.field("value", m.value);
    f.field("parts", m.parts, wire_parts_max);
  }
  friend bool operator==(const Submit&, const Submit&) = default;
};

// Bulk bytes: controller to agent after SUBMIT (copies from its memory) or LOAD (the program),
// agent to controller before REACHED (copies into its memory). The body is the bytes themselves:
// connections hand them over without decoding, and the receiver knows from the message before
// how many to expect.
struct Payload {
  static constexpr std::uint8_t type = 0x30;
  static constexpr std::string_view name = "PAYLOAD";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const Payload&, const Payload&) = default;
};
struct Data {
  static constexpr std::uint8_t type = 0x31;
  static constexpr std::string_view name = "DATA";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const Data&, const Data&) = default;
};

// Rails (docs/rails.md). A rail is a fixed list of transfers from host memory of one process of the
// job (its source) to host memory of another (its destination), carried round after round over
// the connection between the two (its link: an agent-to-agent connection, or the controller's to
// an agent). The controller numbers the job's rails (never 0) and tells each agent end what it
// holds; rounds are numbered 1, 2, ... in the order the source starts them.

// One transfer's memory at one end: `bytes` of buffer `memory` (0: the controller's own) at
// `offset`.
struct WireRailPart {
  std::uint64_t memory = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("memory", m.memory);
    f.field("offset", m.offset);
    f.field("bytes", m.bytes);
  }
  friend bool operator==(const WireRailPart&, const WireRailPart&) = default;
};

// Controller to an agent end of rail `rail`: this agent is its source (role 0) or destination
// (role 1); `peer` names the other end as JOIN named it, empty for the controller; `parts` are
// this end's memory of each transfer, in order. Applied in order; answered by RAILED.
struct RailMake {
  static constexpr std::uint8_t type = 0x40;
  static constexpr std::string_view name = "RAIL";
  static constexpr std::uint8_t source = 0;
  static constexpr std::uint8_t destination = 1;
  std::uint32_t rail = 0;
  std::uint8_t role = 0;
  std::string peer;
  std::vector<WireRailPart> parts;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("role", m.role);
    f.field("peer", m.peer, name_bytes_max);
    f.field("parts", m.parts, rail_transfers_max);
  }
  friend bool operator==(const RailMake&, const RailMake&) = default;
};

// Agent to controller, the answer to RAIL: empty `why`, or why this end cannot hold the rail.
struct RailMade {
  static constexpr std::uint8_t type = 0x41;
  static constexpr std::string_view name = "RAILED";
  std::string why;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.text("why", m.why, reason_bytes_max);
  }
  friend bool operator==(const RailMade&, const RailMade&) = default;
};

// Controller to the source: start round `round` once the work before this message is done and,
// unless `ahead` is 1, the destination has said RAIL_READY for it. With `ahead` 1 the destination
// was asked nothing (it has no work the round must follow, or it is the controller): the bytes go
// at once. The source takes no later message until the round's sources are read (sent).
struct RailGo {
  static constexpr std::uint8_t type = 0x42;
  static constexpr std::string_view name = "RAIL_GO";
  std::uint32_t rail = 0;
  std::uint64_t round = 0;
  std::uint8_t ahead = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("round", m.round);
    f.field("ahead", m.ahead);
  }
  friend bool operator==(const RailGo&, const RailGo&) = default;
};

// Controller to the destination: once the work before this message is done, round `round` may
// write the destinations: say RAIL_READY to the source, and take no later message until the round
// has arrived.
struct RailExpect {
  static constexpr std::uint8_t type = 0x43;
  static constexpr std::string_view name = "RAIL_EXPECT";
  std::uint32_t rail = 0;
  std::uint64_t round = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("round", m.round);
  }
  friend bool operator==(const RailExpect&, const RailExpect&) = default;
};

// Controller to the destination, riding on the controller's next write to it: round `round`
// comes with no RAIL_READY asked (RAIL_GO `ahead`); take no later message that uses the round's
// memory until it has arrived.
struct RailAwait {
  static constexpr std::uint8_t type = 0x49;
  static constexpr std::string_view name = "RAIL_AWAIT";
  std::uint32_t rail = 0;
  std::uint64_t round = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("round", m.round);
  }
  friend bool operator==(const RailAwait&, const RailAwait&) = default;
};

// Destination to source, on the link: round `round` may come.
struct RailReady {
  static constexpr std::uint8_t type = 0x44;
  static constexpr std::string_view name = "RAIL_READY";
  std::uint32_t rail = 0;
  std::uint64_t round = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("round", m.round);
  }
  friend bool operator==(const RailReady&, const RailReady&) = default;
};

// Source to destination, on the link: the RAIL_DATA frame that follows at once carries the next
// bytes of transfer `part` of round `round`, from `offset` in that transfer. A round's bytes come
// in order, transfer after transfer. `driven` is 1 for a round the controller started (RAIL_GO),
// which waits for its arrival: the destination reports it at once, not with a later write.
struct RailChunk {
  static constexpr std::uint8_t type = 0x45;
  static constexpr std::string_view name = "RAIL_CHUNK";
  std::uint32_t rail = 0;
  std::uint64_t round = 0;
  std::uint32_t part = 0;
  std::uint64_t offset = 0;
  std::uint8_t driven = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("round", m.round);
    f.field("part", m.part);
    f.field("offset", m.offset);
    f.field("driven", m.driven);
  }
  friend bool operator==(const RailChunk&, const RailChunk&) = default;
};

// A rail's bytes (bulk, like PAYLOAD), read straight into the destination.
struct RailData {
  static constexpr std::uint8_t type = 0x46;
  static constexpr std::string_view name = "RAIL_DATA";
  template <typename M, typename F>
  static void fields(M&, F&) {}
  friend bool operator==(const RailData&, const RailData&) = default;
};

// A rail's count as its sender holds it: `which` 0 is sent (source to controller), 1 arrived
// (destination to source and to controller). Counts only grow.
struct RailCount {
  static constexpr std::uint8_t type = 0x47;
  static constexpr std::string_view name = "RAIL_COUNT";
  static constexpr std::uint8_t sent = 0;
  static constexpr std::uint8_t arrived = 1;
  std::uint32_t rail = 0;
  std::uint8_t which = 0;
  std::uint64_t value = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
    f.field("which", m.which);
    f.field("value", m.value);
  }
  friend bool operator==(const RailCount&, const RailCount&) = default;
};

// The rail is done with: controller to the source, in order; the source passes it on to the
// destination on the link after the bytes of its last round. Each end lets go of it then.
struct RailEnd {
  static constexpr std::uint8_t type = 0x48;
  static constexpr std::string_view name = "RAIL_END";
  std::uint32_t rail = 0;
  template <typename M, typename F>
  static void fields(M& m, F& f) {
    f.field("rail", m.rail);
  }
  friend bool operator==(const RailEnd&, const RailEnd&) = default;
};

using Message =
    std::variant<Heartbeat, Abort, Close, Closed, Join, Ready, Reached, Open, Opened, Make, Made,
                 Free, Load, Loaded, Unload, Submit, Payload, Data, RailMake, RailMade, RailGo,
                 RailExpect, RailReady, RailChunk, RailData, RailCount, RailEnd, RailAwait>;

// Whether frames of this type carry raw bytes that connections pass on undecoded.
constexpr bool is_bulk(std::uint8_t type) noexcept {
  return type == Payload::type || type == Data::type || type == RailData::type;
}

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
