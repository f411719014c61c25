// Event: a one-shot event that threads wait on (a job started or finished, a round trip's answer).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace rig::remote {

// Set once, by any thread; waited on by any number of threads. Owner: whatever holds it (a job's
// state, a reply, a caller's stack frame). Threads: any.
class Event {
 public:
  // Notifies under the lock: a waiter that sees the event may destroy the Event at once (it often
  // lives on the waiter's stack), so nothing may touch it after the lock is released.
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool is_set() const {
    std::lock_guard lock(mu_);
    return set_;
  }
  // Waits up to `ms`; returns whether the event happened.
  bool wait_for_ms(std::int64_t ms) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

}  // namespace rig::remote
