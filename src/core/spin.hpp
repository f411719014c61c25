// Spinning waits: the pause between two looks at what is waited for, the one loop every spin
// of the runtime uses (timeline and rail waits, the CUDA engine's polls), and the yield that the
// loops' polls share with it, which turns every spin off while the core is contended.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/limits.hpp"

namespace rig::detail {

// Tells the processor this is a spin loop: it saves power and leaves the core's resources to a
// sibling hyperthread, and costs a few dozen cycles.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Looks a spin makes between two readings of the clock, each reading followed by an offer of the
// core to another thread. Measured on an H200 (the CUDA backend's figures, interleaved runs): with
// 16, small work completes as fast as with polls that never yield (9-11 us for a 64 B pinned copy);
// with 64 it took 46-49 us, close to the whole poll budget, as the thread that publishes what the
// spin waits for got the core only at a yield. Measure again before changing it.
inline constexpr unsigned spin_looks_per_yield = 16;

// The process's view of its cores' contention (yield_for_spin): until when (steady clock, ns since
// its epoch) every spin and poll is off and for how long they last went off, and the late yields
// of the current window. Owner: the process (static storage, so a signal handler's wait may read
// it). Threads: any, relaxed: the threads that spin for one another share cores, and a count lost
// to a race only delays the verdict by one late yield.
struct SpinContention {
  std::atomic<std::int64_t> off_until_ns{0};
  std::atomic<std::int64_t> off_period_ns{0};  // of the last time off; 0 before the first
  std::atomic<std::int64_t> window_start_ns{0};
  std::atomic<unsigned> late_in_window{0};
};
inline SpinContention spin_contention;

inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether a spin or a poll may start at `now_ns` (steady_ns): not while the core is contended
// (yield_for_spin). Callers that read the clock anyway pass their reading: the clock is one of the
// larger items of a pipelined message's CPU (bench/README).
inline bool spins_allowed(std::int64_t now_ns) noexcept {
  return now_ns >= spin_contention.off_until_ns.load(std::memory_order_relaxed);
}
inline bool spins_allowed() noexcept {
  return spins_allowed(steady_ns());
}

// The yield between a spin's or a poll's looks, so that a thread it waits for on this very core
// (a loop, a device's worker, the peer process when both ends share a core) runs meanwhile; with
// nothing else to run it returns at once. A spinner is never asleep, so nothing the answer does
// (a socket's data, a futex wake) takes the core back for it: with a busy neighbour on the core
// every yield gives the neighbour its whole time slice again (measured on the VM under a nice-10
// busy loop on each core: remote round trips of 4 ms, a scheduler tick, where blocking TCP took
// 25 us). So once `late_yields_contended` yields within a window came back `yield_late_ns` late,
// spins and polls stop (for spins_off_ns_min, or twice the last time off if that ended within a
// window: core/limits.hpp) and waits sleep, to be woken; false then, and the caller stops
// spinning now. `before` is the caller's reading of steady_ns right before the call.
inline bool yield_for_spin(std::int64_t before) noexcept {
  sched_yield();
  const std::int64_t after = steady_ns();
  if (after - before < static_cast<std::int64_t>(yield_late_ns)) return true;
  SpinContention& c = spin_contention;
  if (after - c.window_start_ns.load(std::memory_order_relaxed) >=
      static_cast<std::int64_t>(late_yields_window_ns)) {
    c.window_start_ns.store(after, std::memory_order_relaxed);
    c.late_in_window.store(0, std::memory_order_relaxed);
  }
  if (c.late_in_window.fetch_add(1, std::memory_order_relaxed) + 1 < late_yields_contended) {
    return true;
  }
  c.late_in_window.store(0, std::memory_order_relaxed);
  const std::int64_t last_end = c.off_until_ns.load(std::memory_order_relaxed);
  std::int64_t period = c.off_period_ns.load(std::memory_order_relaxed);
  if (period == 0 || after - last_end >= static_cast<std::int64_t>(late_yields_window_ns)) {
    period = static_cast<std::int64_t>(spins_off_ns_min);
  } else {
    period = std::min(2 * period, static_cast<std::int64_t>(spins_off_ns_max));
  }
  c.off_period_ns.store(period, std::memory_order_relaxed);
  c.off_until_ns.store(after + period, std::memory_order_relaxed);
  return false;
}
inline bool yield_for_spin() noexcept {
  return yield_for_spin(steady_ns());
}

// A turn to spin: spin_for takes one for its whole spin. The process spins on at most one fewer
// threads at once than the CPUs the spinning thread may use (at least one), so that the thread a
// spin waits for (the loop, a worker) keeps a CPU. Measured on the VM with the controller confined
// to one CPU, 4 threads submitting to one device and waiting: while every waiter spun, each
// yield handed the CPU to another spinner instead of the loop (0.8 sched_yield per submission);
// with one spinner and the others asleep until their value is reached (core/timeline.hpp), the
// 4 threads made 175k/s where they made 157k/s (one core), 203k/s where 178k/s (across cores).
// A thread refused a turn makes one look and then sleeps, as when spins are off. Owner: the
// caller's stack frame; the count is the process's (static storage, a signal handler may wait).
class SpinTurn {
 public:
  SpinTurn() noexcept {
    granted_ = spinners().fetch_add(1, std::memory_order_relaxed) < spinners_max();
    if (!granted_) spinners().fetch_sub(1, std::memory_order_relaxed);
  }
  ~SpinTurn() {
    if (granted_) spinners().fetch_sub(1, std::memory_order_relaxed);
  }
  SpinTurn(const SpinTurn&) = delete;
  SpinTurn& operator=(const SpinTurn&) = delete;
  explicit operator bool() const noexcept { return granted_; }

 private:
  static std::atomic<unsigned>& spinners() noexcept {
    static std::atomic<unsigned> count{0};
    return count;
  }
  // Read once per thread (a system call): a thread's CPUs seldom change, and a stale count only
  // lets one spinner too many, or too few, run.
  static unsigned spinners_max() noexcept {
    thread_local unsigned cpus = 0;
    if (cpus == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
      if (cpus == 0) cpus = 1;
    }
    return cpus > 1 ? cpus - 1 : 1;
  }
  bool granted_ = false;
};

// Calls `done` until it returns true (then true) or `budget_ns` has passed (false), with a pause
// between looks and a yield (yield_for_spin) at each reading of the clock. The thread that
// publishes what the spin waits for (a loop thread, a device's worker) may share this core, as
// every thread of a process confined to one CPU does: a spin that never yields would hold it back
// until the spin ends or the scheduler preempts. Alone on its core, the yield returns at once.
// While spins are off (a contended core), or from a late yield on, only one look is made. `done`
// may throw (a lost timeline), which ends the spin.
template <typename Done>
bool spin_for(std::uint64_t budget_ns, Done&& done) {
  if (budget_ns == 0) return done();
  const std::int64_t start = steady_ns();
  if (!spins_allowed(start)) return done();
  const SpinTurn turn;
  if (!turn) return done();
  const std::int64_t until = start + static_cast<std::int64_t>(budget_ns);
  for (unsigned look = 1;; ++look) {
    if (done()) return true;
    cpu_relax();
    if (look % spin_looks_per_yield != 0) continue;
    // One reading serves both the budget and the yield's lateness.
    const std::int64_t now = steady_ns();
    if (now >= until) return false;
    if (!yield_for_spin(now)) return done();
  }
}

}  // namespace rig::detail
