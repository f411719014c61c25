// Timeline: the word a device's completed work has reached, and the waits on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/first_cause.hpp"

namespace rig::detail {

// Owner: the DeviceCore it belongs to. Threads: published by the device's completion path, read and
// waited on by any thread. Lifetime: the device's.
//
// The 64-bit word only grows. Publishing stores it with release order; waiters spin briefly, then
// sleep on a 32-bit sequence (a futex) that every publish and the loss bump, so a loss wakes every
// sleeper even though the word itself does not move.
class Timeline {
 public:
  std::uint64_t reached() const noexcept { return word_.load(std::memory_order_acquire); }

  // Stores `value` if it is higher than the word, and wakes sleepers. Any thread.
  void publish(std::uint64_t value) noexcept;

  // Returns once the word reaches `value`; raises rig::Lost once the timeline is lost.
  void wait(std::uint64_t value) const;

  // Marks the timeline lost with `why` (first cause wins) and wakes every waiter. Returns whether
  // this call was the one that lost it. Takes no lock, so a fork's child handler may call it
  // whatever the parent's other threads held.
  bool lose(const std::string& why);

  bool lost() const noexcept { return why_.is_set(); }
  // The cause; empty when not lost.
  std::string why() const;
  // Raises rig::Lost with the cause if lost.
  void check() const;

 private:
  void wake_all() noexcept;

  std::atomic<std::uint64_t> word_{0};
  mutable std::atomic<std::uint32_t> seq_{0};
  mutable std::atomic<std::uint32_t> sleepers_{0};
  FirstCause why_;  // set once, read without a lock
};

}  // namespace rig::detail
