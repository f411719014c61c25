// The CPU device: this process's host memory, and host code run on a worker thread.
#pragma once

#include <memory>

#include "core/device.hpp"

namespace rig::backends {

// Makes the host device ("CPU", arch the processor's level, budget the machine's memory).
std::shared_ptr<detail::DeviceCore> make_host_device();

// Whether `d` is this process's host device (a proxy of another machine's host is not).
bool is_local_host(const detail::DeviceCore& d) noexcept;

}  // namespace rig::backends
