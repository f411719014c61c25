// What a Job handle refers to: the controller's state of one job, grouped by the threads that
// touch it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "remote/controller/event.hpp"
#include "remote/controller/flow.hpp"
#include "remote/controller/launch_report.hpp"
#include "remote/io/direct_lane.hpp"
#include "remote/io/queue.hpp"
#include "remote/io/timing.hpp"
#include "remote/job/job.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

class ProtocolLink;

// The root cause a child of fork sees for the job its parent had open, and its devices' loss.
inline constexpr const char* forked_cause =
    "this process is a child of the job's controller (fork): the job's connections belong to the "
    "parent";

// Owner: the Job handles, the job's protocol while it runs, and the drivers of its devices while
// they use it (they hold it weakly, through its link). Lifetime: until the last of those lets go;
// the protocol may finish long before. Each group below says who writes it and which threads read.
struct JobState : std::enable_shared_from_this<JobState> {
  JobState(pid_t owner, const Timing& job_timing, int report_fd, std::size_t members)
      : pid(owner), timing(job_timing), sending(members), report(report_fd, owner) {
    lanes.reserve(members);
    for (std::size_t i = 0; i < members; ++i) lanes.push_back(std::make_shared<DirectLane>());
  }

  // Written by connect (on its caller's thread, and on the loop inside its call) before any other
  // thread sees the state; read-only after, by any thread. `outcome` is a fresh one until connect
  // has made the protocol, then the protocol's: the job's one root cause.
  const pid_t pid;  // the process that connected: in a child of fork the job counts as failed
  const Timing timing;
  std::shared_ptr<JobOutcome> outcome = std::make_shared<JobOutcome>();
  // Submissions whose messages their submitters wrote themselves (io/direct_lane.hpp), for the
  // protocol to expect their answers (ControllerProtocol::take_written), which frees them. Pushed
  // only under the submission lock, each before its message's first byte leaves, so that the loop
  // never finds a push half done ahead of one whose answer it reads. Declared before `link`, which
  // refers to it.
  MpscQueue written;
  std::shared_ptr<ProtocolLink> link;  // the door to the protocol on the loop (protocol_link.hpp)
  // Each member's name and "HOST:PORT" as dialed, in the job's order (capability records).
  std::vector<std::string> member_names, member_addresses;

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
  // Set in a child of fork (controller.cpp) on the copy of the job its parent had open: nothing
  // the child does reaches the parent's loop or sockets.
  std::atomic<bool> in_child{false};
  // The last rail number given out (rail(): they start at 1).
  std::atomic<std::uint32_t> next_rail{0};

  // The root cause this process records for the job: the fork's in a child of fork (where the
  // parent's protocol never reports), else the protocol's, if any.
  std::optional<std::string> cause() const {
    if (in_child.load(std::memory_order_acquire)) return forked_cause;
    return outcome->cause();
  }

  // Flow control: the loop writes it (each connection's sending watch, a failure's wake);
  // submitters read it and wait.
  SendFlow sending;
  // Each agent's connection as submitters may write to it themselves (io/direct_lane.hpp): made
  // here, before any thread sees the state, so the vector never changes; the connections open and
  // close them on the loop.
  std::vector<std::shared_ptr<DirectLane>> lanes;

  // The launcher's report lines: written by the loop (started, failed) or a closing thread
  // (closed), each once.
  LaunchReport report;
};

}  // namespace rig::remote
