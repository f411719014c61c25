// Running other programs from the CLI (compilers for `rig pack`): through child::spawn, never a
// shell, with output captured to files in a private temporary directory, and clean-up on
// every path, including Ctrl-C.
#pragma once

#include <signal.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rig/result.hpp"

namespace rig::cli {

// A fresh directory, private to this process (mode 0700), under $TMPDIR or /tmp; removed with
// everything in it when the object goes. Owner: the command that made it. Thread: that command's.
// Lifetime: the owning scope; moving hands the removal on.
class TempDir {
 public:
  // Error names the parent directory and the system's reason.
  static Result<TempDir> make(std::string_view prefix);
  ~TempDir();
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Holds back SIGINT, SIGTERM and SIGHUP (those not set to be ignored) while a command runs
// children, so that run_jobs can see them (sigwaitinfo), stop the children and return, and every
// clean-up on the way out runs. When the object goes, the signal mask is restored and a signal that
// was taken is raised again, so the process still ends the way the user asked. Owner: the command.
// Thread: the main thread, with no other thread running. Lifetime: a scope that encloses every
// TempDir of the command.
class Interrupts {
 public:
  Interrupts();
  ~Interrupts();
  Interrupts(const Interrupts&) = delete;
  Interrupts& operator=(const Interrupts&) = delete;

  // The signal that interrupted a run_jobs, or 0.
  int taken() const noexcept { return taken_; }
  // For run_jobs: the signals to wait for, and the one it took (raised again at the end).
  const sigset_t& held() const noexcept { return held_; }
  void take(int sig) noexcept {
    if (taken_ == 0) taken_ = sig;
  }

 private:
  sigset_t held_;      // the interrupting signals and SIGCHLD
  sigset_t previous_;  // the mask before
  struct sigaction previous_chld_;
  int taken_ = 0;
};

// One program to run: argv[0] is looked up in PATH; stdin is /dev/null; stdout and stderr both
// go to `log_path`, created or truncated.
struct Job {
  std::vector<std::string> argv;
  std::string log_path;
};

// How a process ended, from its wait status: "exited with status 1", "was killed by signal 9
// (Killed)".
std::string wait_status_text(int wait_status);

// How a job ended.
struct JobEnd {
  bool started = false;
  std::string start_error;  // why it could not run, when !started
  int wait_status = 0;      // as waitpid reports it, when started

  bool succeeded() const;
  // wait_status_text's, or the start error.
  std::string describe() const;
};

// What a short command printed (stdout and stderr together) and how it ended: for the questions
// rig run asks an engine before it starts anything (`ssh -G`, `scontrol show node`).
struct Captured {
  std::optional<int> wait_status;  // nothing: it could not start (error), or ran past the bound
  std::string text;
  std::string error;  // why it has no wait status
};

// Runs argv (looked up in PATH, stdin /dev/null) and reads what it prints until its end, within
// `timeout_ms` in all; one still running then is killed.
Captured capture(const std::vector<std::string>& argv, int timeout_ms);

// Runs `jobs`, each in a process group of its own, at most `parallel_max` at a time, and waits for
// them. After the first job that fails, no more are started. If an interrupting signal arrives,
// the running jobs' process groups get SIGTERM and the jobs are waited for, and
// `interrupts.taken()` says which signal it was; the ends of jobs that did not run are then left as
// not started.
std::vector<JobEnd> run_jobs(const std::vector<Job>& jobs, std::size_t parallel_max,
                             Interrupts& interrupts);

}  // namespace rig::cli
