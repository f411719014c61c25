// The controller's public calls (rig/remote.hpp: connect, devices, Job's calls, the exit's wait),
// and the start of a job whose members are named already, which launched() shares.
#pragma once

#include <memory>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/member.hpp"
#include "remote/io/timing.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// How a job's members are named: as given (launched: the NAMEs of RIG_REMOTE_AGENTS), or by
// address (connect), where the process's second connection to one address is "HOST:PORT#2".
enum class Naming { given, by_address };

// Starts a job with named members on the process's loop; `report_fd` is the launcher's report
// descriptor, or -1. With Naming::by_address the members come named as their next connection
// would be, and take those numbers only once the job goes on to dial them.
Result<Job> connect_named(const Key& key, std::vector<Member> members, const Timing& timing,
                          int report_fd = -1, Naming naming = Naming::given);

struct JobState;

// The state of this process's last job if `device` is one of its hosts or proxies; else null.
std::shared_ptr<JobState> job_of_device(const rig::detail::DeviceCore& device);
// The same, for a host only.
std::shared_ptr<JobState> job_of_host(const rig::detail::DeviceCore& host);

}  // namespace rig::remote
