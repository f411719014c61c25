// This machine's processor: its instruction-set level, the arch of the host device.
#pragma once

#include <string>
#include <vector>

namespace rig::detail {

// The levels this processor runs, best first: on x86-64 "x86_64-v4" down to "x86_64" (the
// psABI's microarchitecture levels), on 64-bit Arm "aarch64".
const std::vector<std::string>& host_isa_levels();

// The best of them: the host device's arch.
const std::string& host_isa_level();

}  // namespace rig::detail
