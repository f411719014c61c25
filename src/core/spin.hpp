// Spinning waits: the pause between two looks at what is waited for, and the one loop every spin
// of the runtime uses (timeline and rail waits, the CUDA engine's polls).
#pragma once

#include <sched.h>

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

// Calls `done` until it returns true (then true) or `budget_ns` has passed (false), with a pause
// between looks and sched_yield at each reading of the clock. The thread that publishes what the
// spin waits for (a loop thread, a device's worker) may share this core, as every thread of a
// process confined to one CPU does: a spin that never yields would hold it back until the spin
// ends or the scheduler preempts. Alone on its core, the yield returns at once. `done` may throw
// (a lost timeline), which ends the spin.
template <typename Done>
bool spin_for(std::uint64_t budget_ns, Done&& done,
              unsigned looks_per_yield = spin_looks_per_yield) {
  if (budget_ns == 0) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
  for (unsigned look = 1;; ++look) {
    if (done()) return true;
    cpu_relax();
    if (look % looks_per_yield != 0) continue;
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
}

// The looks per yield for a spin of the calling thread on what another thread of this process
// publishes: spin_looks_per_yield, or 1 when the thread may run on one CPU only (`taskset -c N`, a
// one-CPU container, each process of the benchmark's one-core placement). There the publisher runs
// only while the spinner has given the core up, so each look yields at once: the spin still ends
// without a futex sleep and wake-up once the publisher has run, but no longer holds the core for
// looks that cannot succeed. Measured on the VM's one-core placement against 16 looks: an empty
// remote submit 40 -> 31 us, 32 pipelined 230k -> 280-310k/s; not spinning at all gave 28 us but
// 60-140k/s. Not for waits on hardware that works on its own (a GPU's events). The affinity is
// taken again at most every `affinity_recheck_ns`: an operator may move a process at any time.
inline unsigned looks_per_yield() noexcept {
  struct Seen {
    bool known = false;
    unsigned looks = spin_looks_per_yield;
    std::chrono::steady_clock::time_point at{};
  };
  thread_local Seen seen;
  const auto now = std::chrono::steady_clock::now();
  if (!seen.known || now - seen.at >= std::chrono::nanoseconds(affinity_recheck_ns)) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const bool one = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) == 1;
    seen.looks = one ? 1 : spin_looks_per_yield;
    seen.known = true;
    seen.at = now;
  }
  return seen.looks;
}

}  // namespace rig::detail
