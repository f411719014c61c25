// Spinning waits: the pause between two looks at what is waited for, and the one loop every spin
// of the runtime uses (timeline and rail waits, the CUDA engine's polls).
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>

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

// Calls `done` until it returns true (then true) or `budget_ns` has passed (false), with a pause
// between looks and sched_yield at each reading of the clock. The thread that publishes what the
// spin waits for (a loop thread, a device's worker) may share this core, as every thread of a
// process confined to one CPU does: a spin that never yields would hold it back until the spin
// ends or the scheduler preempts. Alone on its core, the yield returns at once. `done` may throw
// (a lost timeline), which ends the spin.
template <typename Done>
bool spin_for(std::uint64_t budget_ns, Done&& done) {
  if (budget_ns == 0) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
  for (unsigned look = 1;; ++look) {
    if (done()) return true;
    cpu_relax();
    if (look % spin_looks_per_yield != 0) continue;
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
}

}  // namespace rig::detail
