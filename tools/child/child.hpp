// Child processes, started and read one way for every program of ours that runs others: `rig`
// (compilers for `rig pack`, agents and the controller for `rig run`), `rigd` (a process per
// job), the benchmark harness (agents, echo peers, workers) and the integration tests.
//
// A child is started with fork and exec, never a shell. Everything it needs is made before the
// fork, so that between fork and exec it makes only async-signal-safe calls (the parents are
// threaded); an exec that fails is reported back through a close-on-exec pipe, so spawn's Error
// says why a program could not run, as posix_spawn would, and a child that spawn returns is
// running the program. Pure functions of their arguments but for the system calls; no state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "rig/result.hpp"

namespace rig::child {

// How to start a child. A descriptor of -1 is left as it is in this process.
struct Spec {
  // argv[0] is a path, or with `search_path` a name looked up in PATH when it holds no '/'.
  std::vector<std::string> argv;
  bool search_path = false;
  // Not empty: the file to run instead, argv[0] being only the name it is given.
  std::string file;
  // Changes to this process's environment: "NAME=VALUE" sets NAME (replacing ours), a bare
  // "NAME" removes it.
  std::vector<std::string> env;
  // The child's stdin, stdout and stderr.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Descriptors left open across the exec (their close-on-exec flag is cleared in the child
  // only, so that no other child started meanwhile inherits them).
  std::vector<int> keep_fds;
  // >= 0: the only core the child may run on, set before exec so that its every thread inherits
  // it.
  int cpu = -1;
  // A process group of its own, so that signalling -pid reaches everything it starts.
  bool own_group = false;
  // The child starts with no signal blocked, whatever this thread holds back.
  bool unblock_signals = false;
  // > 0: the signal the child gets when the thread that started it ends (PR_SET_PDEATHSIG); a
  // child whose parent has already gone exits at once.
  int parent_death_signal = 0;
};

// Starts `spec`; the child's pid. Error: "cannot run 'ARGV0': WHY" when it cannot be started or
// its exec fails (WHY the system's text), or why a step before the exec failed.
Result<pid_t> spawn(const Spec& spec);

// This process's environment with `changes` made, as Spec::env reads them: "NAME=VALUE" entries.
std::vector<std::string> environment_with(const std::vector<std::string>& changes);

// One line from `fd` within `timeout_ms`, without its newline; nothing on timeout, end of file
// or a read error. Reads in chunks: what it read past the line stays in `pending`, which the
// next call on the same descriptor must be handed.
std::optional<std::string> read_line(int fd, std::string& pending, int timeout_ms);
// Everything from `fd` until end of file, after what `pending` holds.
std::string read_all(int fd, std::string pending = {});

// Waits for `pid` to end; its wait status.
int wait_exit(pid_t pid);
// Waits up to `timeout_ms` for `pid` to end; its wait status, or nothing if it is still running.
std::optional<int> wait_for(pid_t pid, int timeout_ms);

}  // namespace rig::child
