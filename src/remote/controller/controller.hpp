// The controller's public calls (rig/remote.hpp: connect, devices, Job's calls, the exit's wait),
// and the start of a job whose members are named already, which launched() shares.
#pragma once

#include <vector>

#include "remote/controller/member.hpp"
#include "remote/io/timing.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// Starts a job with named members (connect names them by address, launched by RIG_REMOTE_AGENTS)
// on the process's loop; `report_fd` is the launcher's report descriptor, or -1.
Result<Job> connect_named(const Key& key, std::vector<Member> members, const Timing& timing,
                          int report_fd = -1);

}  // namespace rig::remote
