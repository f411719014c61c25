// The lines a launcher reads of the job its controller runs (RIG_REMOTE_REPORT): "started", then
// "failed CAUSE" or "closed".
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

namespace rig::remote {

// Each line at most once, in one write, never from a child of fork (job/report.hpp writes them).
// Owner: the handle's state (JobState). Threads: any; the loop reports the start and a failure,
// the closing thread the close.
class LaunchReport {
 public:
  // `fd`: the launcher's report descriptor, or -1 for none; `owner`: the process that may write.
  LaunchReport(int fd, pid_t owner) : fd_(fd), owner_(owner) {}

  void started();
  // The job's end: the first of these writes its line, the other nothing.
  void failed(const std::string& cause);
  void closed();

 private:
  const int fd_;
  const pid_t owner_;
  std::atomic<bool> started_{false};
  std::atomic<bool> ended_{false};
};

}  // namespace rig::remote
