// What a process's connections carried, counted for an operator (rigd's --metrics): bytes and
// messages each way, by the role of the peer, and when bytes last came from one; and the
// connections it listened for that did not prove the key. Off unless a
// process hands in where to count (rigd's job process: a page of shared memory its daemon reads),
// so that a controller or a test pays one load of a null pointer per read and write.
#pragma once

#include <atomic>
#include <cstdint>

namespace rig::remote {

// Counts of a proven connection's traffic, by its peer's role. Every field is a lock-free atomic,
// stored with relaxed order (a reader wants each value, not an order between them), so that the
// loop never waits for a reader, which may be another process mapping the same memory.
// Owner: whoever hands it to set_connection_counters (it outlives every connection of the
// process). Threads: the loop writes; any thread or process reads. Lifetime: the owner's.
struct ConnectionCounters {
  struct Role {
    std::atomic<std::uint64_t> sent_bytes{0};
    std::atomic<std::uint64_t> received_bytes{0};
    std::atomic<std::uint64_t> sent_messages{0};  // messages other than bulk frames
    std::atomic<std::uint64_t> received_messages{0};
    // CLOCK_MONOTONIC (steady_clock), ms, when bytes last came from a peer of this role; 0: never.
    // The same clock in every process of the machine, so another process can read the age.
    std::atomic<std::int64_t> last_received_ms{0};
  };
  Role controller;
  Role agent;
  // Connections this process listened for that did not prove the key, by why (a verdict sent, or
  // no proof within the handshake's bound), and those refused though they might have: another
  // job's dialers, agents before a job, dialers while the job ends, strangers dropped at the cap.
  std::atomic<std::uint64_t> handshakes_wrong_key{0};
  std::atomic<std::uint64_t> handshakes_malformed{0};
  std::atomic<std::uint64_t> handshakes_timed_out{0};
  std::atomic<std::uint64_t> connections_refused{0};
};

// From now on this process's connections count into `counters` (null: no longer). Before the
// first connection: the pointer is read on the loop thread without further synchronisation.
void set_connection_counters(ConnectionCounters* counters) noexcept;
ConnectionCounters* connection_counters() noexcept;

}  // namespace rig::remote
