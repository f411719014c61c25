// A rail's two counts (sent, arrived) as this process holds them: 64-bit words that only grow,
// read by waiters on any thread and by host code on an agent through their addresses. They live in
// one fixed table per process, so that a child of fork raises every count at once (the child must
// see its rails raised from the start) without walking any structure another thread may have
// been changing at the fork.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

namespace rig::remote {

// The value every count of a failed job's rails is raised to (RIG_RAIL_RAISED, rig/kernel.h).
inline constexpr std::uint64_t rail_count_raised = UINT64_MAX;

// One count: the word, and a 32-bit sequence bumped on every change, on which sleepers wait (a
// futex). Owner: the table. Threads: any.
struct RailWord {
  std::atomic<std::uint64_t> value{0};
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> sleepers{0};

  // Stores `v` if it is higher (release order), and wakes sleepers.
  void publish(std::uint64_t v) noexcept;
  std::uint64_t get() const noexcept { return value.load(std::memory_order_acquire); }
  // Returns once the word has reached `v` (spinning briefly, then sleeping): the value then seen.
  // A raised word has reached every value.
  std::uint64_t wait(std::uint64_t v) const noexcept;
  // Returns once the word has reached `v` or `seq` has moved past `seen` (a publish, or a nudge):
  // the value then seen, maybe below `v`.
  std::uint64_t wait_moved(std::uint64_t v, std::uint32_t seen) const noexcept;
  // Wakes sleepers without a change of value: something else they wait for has come (a read
  // lane lent to them).
  void nudge() noexcept;
};

// Both counts of one rail at one process, two words of the table. Owner: the rail as this process
// holds it; move-only. Threads: any reads and waits; the loop publishes. Lifetime: the words
// return to the table when it is destroyed.
class RailCounts {
 public:
  // Two free words, zeroed; nothing when the process holds rails_max rails already. Lock-free.
  static std::optional<RailCounts> take() noexcept;
  RailCounts(RailCounts&& other) noexcept : slot_(other.slot_) { other.slot_ = none; }
  RailCounts& operator=(RailCounts&&) = delete;
  ~RailCounts();

  RailWord& sent() const noexcept;
  RailWord& arrived() const noexcept;
  // A round has arrived: arrived moves to `round`, and sent with it (a round's sources were all
  // read before its last byte left), sent first, so that whoever sees the arrival also sees sent at
  // least as far. Loop thread.
  void arrive(std::uint64_t round) noexcept;
  // Both raised to rail_count_raised, their waiters woken: the job has failed.
  void raise() noexcept;
  // Which of the table's rails_max pairs these are: other per-rail tables of fixed size (an
  // agent's host-code records) use the same index.
  std::uint32_t slot() const noexcept { return slot_; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;
  explicit RailCounts(std::uint32_t slot) noexcept : slot_(slot) {}
  std::uint32_t slot_;
};

// Raises every word of the table: what a child of fork sees. Async-signal-safe.
void raise_every_rail_count() noexcept;

}  // namespace rig::remote
