// Time as a seam: the reactor and every deadline read a Clock, so tests can drive the 10 s rules
// in microseconds with a ManualClock instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rig::remote {

// Milliseconds on a monotonic clock. Threads: any.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::int64_t now_ms() const noexcept = 0;
};

class SteadyClock final : public Clock {
 public:
  std::int64_t now_ms() const noexcept override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static SteadyClock& get() {
    static SteadyClock clock;
    return clock;
  }
};

// A clock that moves only when a test moves it. Threads: any.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::int64_t start_ms = 1'000'000) : now_(start_ms) {}
  std::int64_t now_ms() const noexcept override { return now_.load(std::memory_order_acquire); }
  void advance(std::int64_t ms) noexcept { now_.fetch_add(ms, std::memory_order_acq_rel); }

 private:
  std::atomic<std::int64_t> now_;
};

}  // namespace rig::remote
