// What a Job handle refers to: the controller's state of one job, grouped by the threads that
// touch it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "remote/controller/event.hpp"
#include "remote/controller/flow.hpp"
#include "remote/controller/launch_report.hpp"
#include "remote/io/timing.hpp"
#include "remote/job/job.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

class ProtocolLink;

// Owner: the Job handles, the job's protocol while it runs, and the drivers of its devices while
// they use it (they hold it weakly, through its link). Lifetime: until the last of those lets go;
// the protocol may finish long before. Each group below says who writes it and which threads read.
struct JobState : std::enable_shared_from_this<JobState> {
  JobState(pid_t owner, const Timing& job_timing, int report_fd, std::size_t members)
      : pid(owner), timing(job_timing), sending(members), report(report_fd, owner) {}

  // Written by connect (on its caller's thread, and on the loop inside its call) before any other
  // thread sees the state; read-only after, by any thread. `outcome` is a fresh one until connect
  // has made the protocol, then the protocol's: the job's one root cause.
  const pid_t pid;  // the process that connected: in a child of fork the job counts as failed
  const Timing timing;
  std::shared_ptr<JobOutcome> outcome = std::make_shared<JobOutcome>();
  std::shared_ptr<ProtocolLink> link;  // the door to the protocol on the loop (protocol_link.hpp)

  // The handle's data: any thread. The loop writes `hosts` once, under `mu`, before it sets
  // `started`; it is read without the lock after. devices() reads and writes `opened` under `mu`.
  // The events and flags synchronise themselves.
  std::mutex mu;
  std::vector<Device> hosts;
  // devices(): the proxies of each (machine, kind) opened so far.
  std::map<std::pair<std::size_t, std::string>, std::vector<Device>> opened;
  Event started;   // set by the loop once every agent is READY and the hosts exist
  Event finished;  // set by the loop once every connection has closed
  std::atomic<bool> close_sent{false};  // set by Job::close; devices() refuses after
  std::atomic<bool> closed{false};      // set by Job::close as it ends

  // Flow control: the loop writes it (each connection's sending watch, a failure's wake);
  // submitters read it and wait.
  SendFlow sending;

  // The launcher's report lines: written by the loop (started, failed) or a closing thread
  // (closed), each once.
  LaunchReport report;
};

}  // namespace rig::remote
