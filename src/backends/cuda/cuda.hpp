// The CUDA backend as open.cpp sees it: making the devices, and knowing one.
#pragma once

#include <memory>
#include <vector>

#include "core/device.hpp"
#include "rig/result.hpp"

namespace rig::backends {

// One device per GPU of this machine, named CUDA:N by the driver's ordinal. Error says why there
// are none when the driver cannot be loaded or set up; an empty list when it reports no GPU.
Result<std::vector<std::shared_ptr<detail::DeviceCore>>> make_cuda_devices();

bool is_cuda(const detail::DeviceCore& d) noexcept;

}  // namespace rig::backends
