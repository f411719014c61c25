// SIM devices: simulated accelerators with their own allocations, budget and latency.
#pragma once

#include <memory>
#include <string>

#include "core/device.hpp"
#include "rig/sim.hpp"

namespace rig::backends {

std::shared_ptr<detail::DeviceCore> make_sim_device(std::string name, const sim::Options& options);

bool is_sim(const detail::DeviceCore& d) noexcept;

}  // namespace rig::backends
