// The harness's processes: agents, echo peers and workers it starts, each pinned to a core when
// asked, and the little it reads from /proc about them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rig/result.hpp"

namespace rig::bench {

// A process this harness started. Owner: the harness's main thread; stop() or wait_exit() reaps
// it.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;          // its stdout, when captured
  std::string out_pending;  // what was read from out_fd past the last line read

  // One line of its stdout within `timeout_ms` (rig::child::read_line).
  std::optional<std::string> line(int timeout_ms);
  // The rest of its stdout, until end of file.
  std::string rest();
};

// Starts argv[0] (a path) with `cpu` >= 0 as its only core (set before exec, so every thread it
// makes inherits it), its stdout on a pipe when `capture_stdout`, and its stderr appended to
// `err_path` when that is not empty (else ours), and our environment with `env`'s NAME=VALUE
// entries set in it: rig::child::spawn with the harness's pipe and log.
Result<Child> spawn(const std::vector<std::string>& argv, int cpu, bool capture_stdout,
                    const std::string& err_path = {}, const std::vector<std::string>& env = {});

// Waits for the child to end and returns its wait status.
int wait_exit(Child& c);
// Sends `sig`, waits up to `wait_ms`, then kills it; closes its pipe.
void stop(Child& c, int sig, int wait_ms);

// Pins the calling thread (and so every thread it makes later) to `cpu`.
bool pin_self(int cpu);

// CPU time used by every thread of `pid`, in ns, from /proc/PID/task/*/schedstat (the scheduler's
// run time, ns resolution), or nothing if it cannot be read.
std::optional<std::uint64_t> cpu_ns_schedstat(pid_t pid);
// The same from /proc/PID/stat (utime + stime, in clock ticks turned into ns: 10 ms resolution).
std::optional<std::uint64_t> cpu_ns_stat(pid_t pid);
// This process's resident memory in bytes (VmRSS).
std::uint64_t rss_bytes();
// The children of `pid` (/proc/PID/task/PID/children).
std::vector<pid_t> children_of(pid_t pid);
// Every descendant of `pid`, parents before their children.
std::vector<pid_t> descendants_of(pid_t pid);

// What the scheduler counted for one thread: its time on a CPU and waiting for one, the times it
// was put on one (/proc/PID/task/TID/schedstat), and its switches away, asleep or preempted
// (.../status). Summed over a scenario, they say whose turns a round trip takes on a shared core.
struct ThreadCounts {
  pid_t pid = -1;
  pid_t tid = -1;
  std::string name;  // the thread's (comm): rig's threads name themselves (rig-loop, rig-worker)
  std::uint64_t run_ns = 0;
  std::uint64_t wait_ns = 0;
  std::uint64_t slices = 0;
  std::uint64_t voluntary = 0;
  std::uint64_t involuntary = 0;
};
// Every thread of `pid` now; empty if it is gone.
std::vector<ThreadCounts> thread_counts(pid_t pid);

}  // namespace rig::bench
