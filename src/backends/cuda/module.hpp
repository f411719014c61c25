// CUDA code from a rig.program: choosing the target for a GPU and loading it into its context.
#pragma once

#include <memory>

#include "backends/cuda/gpus.hpp"
#include "core/device.hpp"
#include "rig/program.hpp"

namespace rig::backends::cuda {

// The target to load on an `sm` GPU: the cubin built for exactly that arch if there is one, else
// the PTX for the highest arch not above it (the driver compiles PTX for newer GPUs, never for
// older ones). nullptr when neither fits.
const Target* choose_cuda_target(const Program& program, int sm, bool cubin_allowed = true);

// Loads the chosen target on `gpu`: a cubin as it is, PTX compiled by the driver's JIT. A cubin the
// driver refuses for this GPU falls back to the PTX. Error names the target and the driver's
// reason, with the JIT's log for PTX.
Result<std::unique_ptr<detail::Module>> load_module(const Api& api, const Gpu& gpu,
                                                    const Program& program);

}  // namespace rig::backends::cuda
