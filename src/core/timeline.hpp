// Timeline: the word a device's completed work has reached, and the waits on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/first_cause.hpp"
#include "core/limits.hpp"

namespace rig::detail {

// Owner: the DeviceCore it belongs to. Threads: published by the device's completion path, read and
// waited on by any thread. Lifetime: the device's.
//
// The 64-bit word only grows. Waiters spin briefly, then sleep. A sleeper takes a slot of its own
// (the value it waits for and a futex word), so that a publish wakes only the sleepers whose value
// it reached: threads waiting on one device for successive values were all woken by every
// publish, and each but one went back to sleep (3 futex waits per submission, 4 threads
// submitting to one remote device). With every slot taken, a sleeper sleeps on the shared
// sequence instead, which every publish bumps and wakes. A loss wakes every sleeper of both kinds
// even though the word itself does not move.
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

  // A cause this timeline shares with others (a remote job's outcome) and reads as its own loss
  // once it is set, before lose() is called: every device of a failed job reads lost, with the
  // job's cause, from the instant the job reads failed, though the job's loop loses them (and wakes
  // their sleepers) one by one after. Called once, before the device is shared with other threads.
  void share_cause(std::shared_ptr<const FirstCause> shared) { shared_ = std::move(shared); }

  bool lost() const noexcept { return why_.is_set() || (shared_ && shared_->is_set()); }
  // The cause; empty when not lost.
  std::string why() const;
  // Raises rig::Lost with the cause if lost.
  void check() const;

 private:
  // One sleeper's slot: the value it waits for (0: free; `woken`: woken already, not yet gone)
  // and the futex word it sleeps on. No timeline's value reaches `woken`.
  static constexpr std::uint64_t woken = ~std::uint64_t{0};
  struct Slot {
    std::atomic<std::uint64_t> want{0};
    std::atomic<std::uint32_t> seq{0};
  };
  // Wakes the slotted sleepers whose value `reached` covers.
  void wake_slots(std::uint64_t reached) const noexcept;
  void wake_all() noexcept;
  void sleep_in(Slot& slot, std::uint64_t value) const;
  void sleep_shared(std::uint64_t value) const;

  std::atomic<std::uint64_t> word_{0};
  mutable Slot slots_[timeline_sleeper_slots];
  mutable std::atomic<std::uint32_t> slotted_{0};   // slots taken
  mutable std::atomic<std::uint32_t> seq_{0};       // the shared sequence
  mutable std::atomic<std::uint32_t> sleepers_{0};  // sleepers on the shared sequence
  FirstCause why_;                                  // set once, read without a lock
  std::shared_ptr<const FirstCause> shared_;        // set before other threads see the timeline
};

}  // namespace rig::detail
