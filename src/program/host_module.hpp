// Host code from a rig.program: choosing the target for this processor and loading it from memory.
#pragma once

#include <memory>

#include "core/device.hpp"
#include "rig/program.hpp"
#include "rig/result.hpp"

namespace rig::program {

// The host target of `program` for this machine: the highest instruction-set level that both the
// program holds and the processor runs. Error saying which levels each has when none fits.
Result<const Target*> choose_host_target(const Program& program);

// Loads that target from memory (memfd_create, then dlopen of its /proc path, so nothing touches
// the file system) and checks the kernel ABI it was built for. Its entries are rig_entry pointers.
Result<std::unique_ptr<detail::Module>> load_host(const Program& program);

}  // namespace rig::program
