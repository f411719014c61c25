// CUDA devices: one per GPU of this machine, through the CUDA driver, which is loaded at run time
// (libcuda.so.1, or the path in RIG_CUDA_LIB). docs/cuda.md says what they need and how they
// behave.
#pragma once

#include <vector>

#include "rig/result.hpp"
#include "rig/rig.hpp"

namespace rig::cuda {

// The CUDA devices, as rig::open(Kind::cuda) returns them ("CUDA:0", "CUDA:1", ...), or why there
// are none: the driver library cannot be loaded, is too old, or fails to start (cuInit says
// CUDA_ERROR_NO_DEVICE on a machine without a GPU). Raises Lost once the process has failed.
Result<std::vector<Device>> open();

}  // namespace rig::cuda
