// What a process's connections carried, counted for an operator (rigd's --metrics): bytes and
// messages each way, by the role of the peer, and when bytes last came from one; and the
// connections it listened for that did not prove the key. Off unless a
// process hands in where to count (rigd's job process: a page of shared memory its daemon reads),
// so that a controller or a test pays one load of a null pointer per read and write.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rig::remote {

// Where a process counts one kind of thing for an operator: the record it hands in (before the
// loop starts; null turns counting off), which the loop finds on every event with one load.
// Owner of the record: whoever hands it in, for as long as it is set. Threads: any.
template <class Counts>
class CountsAt {
 public:
  static void set(Counts* counts) noexcept { at_.store(counts, std::memory_order_release); }
  static Counts* get() noexcept { return at_.load(std::memory_order_acquire); }

 private:
  static inline std::atomic<Counts*> at_{nullptr};
};

// Text of at most Bytes - 1 bytes that one writer stores and readers in other processes load, one
// relaxed atomic char at a time: a reader racing a store may see a mix of the two texts, never
// more than the bound. For names and addresses an operator reads, never for what must be exact.
template <std::size_t Bytes>
struct SharedText {
  std::atomic<char> chars[Bytes]{};

  void store(std::string_view text) noexcept {
    const std::size_t n = std::min(text.size(), Bytes - 1);
    for (std::size_t i = 0; i < n; ++i) chars[i].store(text[i], std::memory_order_relaxed);
    chars[n].store('\0', std::memory_order_relaxed);
  }
  std::string load() const {
    std::string out;
    for (const auto& c : chars) {
      const char ch = c.load(std::memory_order_relaxed);
      if (ch == '\0') break;
      out.push_back(ch);
    }
    return out;
  }
  // Whether it holds `text` (as stored: cut at the bound); allocates nothing.
  bool holds(std::string_view text) const noexcept {
    text = text.substr(0, std::min(text.size(), Bytes - 1));
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (chars[i].load(std::memory_order_relaxed) != text[i]) return false;
    }
    return chars[text.size()].load(std::memory_order_relaxed) == '\0';
  }
  bool empty() const noexcept { return chars[0].load(std::memory_order_relaxed) == '\0'; }
  void clear() noexcept {
    for (auto& c : chars) c.store('\0', std::memory_order_relaxed);
  }
};

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

  // Every count back to 0, by the owner while no process counts into it.
  void clear() noexcept;
};

// From now on this process's connections count into `counters` (null: no longer). Before the
// first connection.
inline void set_connection_counters(ConnectionCounters* counters) noexcept {
  CountsAt<ConnectionCounters>::set(counters);
}
inline ConnectionCounters* connection_counters() noexcept {
  return CountsAt<ConnectionCounters>::get();
}

}  // namespace rig::remote
