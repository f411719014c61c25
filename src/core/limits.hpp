// The local runtime's limits and tunables, with their units, in one place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rig::detail {

// A waiter spins this long on a timeline word before it sleeps: waking a sleeping thread costs
// about 80 us on the small VMs we run on, so a short spin catches fast work at a small cost in CPU.
inline constexpr std::uint64_t wait_spin_ns = 20'000;

// Parts in one submission; a bound so that one call cannot make the runtime allocate without limit.
inline constexpr std::size_t submission_parts_max = 4096;

// Arguments of one run.
inline constexpr std::size_t run_args_max = 256;

// Default number of SIM devices rig::open(Kind::sim) opens; RIG_SIM_DEVICES overrides it.
inline constexpr unsigned sim_devices_default = 2;
inline constexpr unsigned sim_devices_max = 64;

}  // namespace rig::detail
