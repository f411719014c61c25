// The local runtime's limits and tunables, with their units, in one place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tunables.hpp"

namespace rig::detail {

// A waiter spins this long on a timeline word before it sleeps: waking a sleeping thread costs
// about 80 us on the small VMs we run on, so a short spin catches fast work at a small cost in CPU.
inline constexpr std::uint64_t wait_spin_ns = 20'000;
// Sleepers of one timeline that each get a futex word of their own, woken only by the publish that
// reaches their value (core/timeline.hpp); more sleep on the shared word, woken by every publish.
// Several threads submitting to one device and waiting is the case this serves; 8 covers the
// submitting threads of a controller of its cores, at 16 bytes each.
inline constexpr std::size_t timeline_sleeper_slots = 8;
// A spin's yield that comes back this late means another thread of the machine held the core for
// a time slice (a busy neighbour: a compile, another job), or the machine itself was paused (a
// VM's vCPU preempted by its host). Far above a peer's turn on a shared core (tens of
// microseconds), below the schedulers' shortest slices (0.75 ms and up).
inline constexpr std::uint64_t yield_late_ns = 500'000;
// This many late yields within `late_yields_window_ns` mean a contended core (core/spin.hpp,
// yield_for_spin): a busy neighbour makes hundreds a second; a quiet VM showed 13 in 40 s of
// round trips (0.5-4 ms each, its host's preemptions), which must not turn the spins off.
inline constexpr unsigned late_yields_contended = 8;
inline constexpr std::uint64_t late_yields_window_ns = 1'000'000'000;
// How long spins and polls stay off on a contended core: every wait sleeps, every loop sleeps in
// epoll, and a wake-up takes the core back from the neighbour as the blocking TCP baseline does.
// A first verdict turns them off for the shortest time; one that comes within a window of the end
// of the last time off doubles it, up to the longest; a window without one starts again at the
// shortest. A lasting neighbour so costs a few windows of late round trips before the longest
// holds (each time spins come back, 8 late yields, about 30 ms on the VM, until the next verdict);
// a short burst costs only the shortest. Measured on an H200 (bench/README.md, "Session 16"): a
// job's processes each made a verdict as they started, and with a second off, their loops slept
// in epoll through the job's first 1.2 s, which held all of a 10,000-sample latency figure of the
// benchmark; with these periods, they polled again after 150-300 ms.
inline constexpr std::uint64_t spins_off_ns_min = 50'000'000;
inline constexpr std::uint64_t spins_off_ns_max = 1'000'000'000;

// Parts in one submission; a bound so that one call cannot make the runtime allocate without limit.
inline constexpr std::size_t submission_parts_max = 4096;

// Arguments of one run.
inline constexpr std::size_t run_args_max = 256;

// The tunables of the local runtime and its backends (core/tunables.hpp says how each is read).

// Default number of SIM devices rig::open(Kind::sim) opens; RIG_SIM_DEVICES overrides it.
inline constexpr unsigned sim_devices_default = 2;
inline constexpr unsigned sim_devices_max = 64;
inline constexpr Tunable sim_devices_tunable{"RIG_SIM_DEVICES", "a count", sim_devices_default,
                                             sim_devices_max};

// The latency of each copy or run on the SIM devices rig::open(Kind::sim) opens, "MIN-MAX" (drawn
// at random per operation) or one value, so that an agent's SIM devices can be made slow and
// irregular for tests of ordering across machines. None by default; at most 10 s.
inline constexpr std::uint64_t sim_latency_us_default = 0;
inline constexpr std::uint64_t sim_latency_us_max = 10'000'000;
inline constexpr Tunable sim_latency_us_tunable{"RIG_SIM_LATENCY_US", "a time in microseconds",
                                                sim_latency_us_default, sim_latency_us_max,
                                                /*range=*/true};
// The seed of those draws (each device mixes its index in).
inline constexpr std::uint64_t sim_seed_default = 1;
inline constexpr Tunable sim_seed_tunable{"RIG_SIM_SEED", "a seed", sim_seed_default, UINT64_MAX};

// How long the CUDA backend polls for the end of work before a completion thread looks only
// between sleeps (below), and how long it watches for new work after the last before it sleeps on
// its condition variable. On an H200 a polled 64 B copy completes in about 7 us, while waking a
// sleeping thread costs several microseconds and a host-function wake-up 19-59 us; a poll of a few
// tens of microseconds catches small, back-to-back work early without burning a core on long work
// or on an idle device. RIG_CUDA_POLL_NS overrides it (0: no poll, every look after a sleep), for
// the benchmark that compares the two.
inline constexpr std::uint64_t cuda_poll_ns_default = 50'000;
inline constexpr std::uint64_t cuda_poll_ns_max = 1'000'000'000;
inline constexpr Tunable cuda_poll_ns_tunable{"RIG_CUDA_POLL_NS", "a time in nanoseconds",
                                              cuda_poll_ns_default, cuda_poll_ns_max};

// After the poll, a CUDA engine's thread looks at the work again after each sleep, every sleep this
// share of the time it has waited so far, within the bounds below: work is found done at most an
// eighth of its time late (plus one shortest sleep), and work of a second costs about 1,000 looks
// once the sleeps reach their longest. Not a blocking wait in the driver: that needs events made
// with CU_EVENT_BLOCKING_SYNC, which cost an interrupt at every work (backends/cuda/engine.hpp).
inline constexpr std::uint64_t cuda_sleep_share = 8;
inline constexpr std::uint64_t cuda_sleep_ns_min = 20'000;
inline constexpr std::uint64_t cuda_sleep_ns_max = 1'000'000;
// How long a CUDA engine leaves the finding of finished work to a thread that polls for it itself
// (Driver::progress: an agent's loop) after that thread's last look, its completion thread resting
// meanwhile. Measured on an H200, a 64 B copy through an agent (bench/README.md, "Session 16"):
// with the loop's looks added and the completion thread polling beside them as before, nothing
// was gained where the agent had one core, and through an agent free to use any core the copy took
// 31.8-38.0 us where it took 22.1-23.4 (the two threads querying the one event); with the
// completion thread looking only after sleeps of 20 us, its wake-ups took the agent's core (58-59
// us where 31-43). Resting with no wake-up: 27.5-40.9 us where 34.8-47.6 with controller and agent
// on one core. Long enough that a poller's looks (one a turn of its loop, microseconds apart)
// renew it with no wake-up between; a poller that stops says so (Driver::stop_polling), so the
// lease only bounds how late work is found if one never does.
inline constexpr std::uint64_t cuda_poll_lease_ns = 1'000'000;

// The timer slack of the engine's threads, whose sleeps above would otherwise each be stretched by
// the kernel's default of 50 us.
inline constexpr unsigned long cuda_timer_slack_ns = 1'000;

// Every tunable above, for a program's check at its start (rigd's).
inline constexpr Tunable core_tunables[] = {sim_devices_tunable, sim_latency_us_tunable,
                                            sim_seed_tunable, cuda_poll_ns_tunable};

}  // namespace rig::detail
