// Real processes for integration tests: spawn with pipes, read lines with a deadline, signal,
// reap, all through rig::child (tools/child), the code rig, rigd and the bench start theirs with.
// No test sleeps for an outcome: each waits for an event with a bound.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "child/child.hpp"

namespace rig::test {

// Lines from `fd` (with `pending`, as rig::child::read_line keeps it) until one contains
// `needle`, within `ms`: that line, or nothing at the end of the output or the bound.
inline std::optional<std::string> line_until(int fd, std::string& pending,
                                             const std::string& needle, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return std::nullopt;
    auto l = rig::child::read_line(fd, pending, static_cast<int>(left));
    if (!l || l->find(needle) != std::string::npos) return l;
  }
}

// One child process. Owner: the test that made it. Thread: any one at a time. Lifetime: the
// scope; a child still running at the end is killed and reaped.
class Process {
 public:
  // Starts `argv` with stdout and stderr on pipes; `env_extra` ("NAME=VALUE") sets those in the
  // environment; `keep_fds` stay open in the child. Throws std::runtime_error with spawn's Error.
  explicit Process(const std::vector<std::string>& argv,
                   const std::vector<std::string>& env_extra = {},
                   const std::vector<int>& keep_fds = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    if (pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      throw std::runtime_error("pipe");
    }
    rig::child::Spec spec;
    spec.argv = argv;
    spec.env = env_extra;
    spec.stdout_fd = out[1];
    spec.stderr_fd = err[1];
    spec.keep_fds = keep_fds;
    const auto pid = rig::child::spawn(spec);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (!pid) {
      ::close(out_);
      ::close(err_);
      throw std::runtime_error(pid.error());
    }
    pid_ = *pid;
  }
  ~Process() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      wait();
    }
    ::close(out_);
    ::close(err_);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of stdout, or nothing if none comes within `ms`.
  std::optional<std::string> line(int ms = 10'000) {
    return rig::child::read_line(out_, out_buf_, ms);
  }
  // The next line of stderr.
  std::optional<std::string> err_line(int ms = 10'000) {
    return rig::child::read_line(err_, err_buf_, ms);
  }
  // stderr lines until one contains `needle`, within `ms`; that line.
  std::optional<std::string> err_until(const std::string& needle, int ms = 10'000) {
    return line_until(err_, err_buf_, needle, ms);
  }

  void signal(int sig) { kill(pid_, sig); }
  // The exit status (as waitpid gives it).
  int wait() {
    if (reaped_) return status_;
    status_ = rig::child::wait_exit(pid_);
    reaped_ = true;
    return status_;
  }
  // Waits up to `ms` for the process to end; whether it did.
  bool wait_for(int ms) {
    if (reaped_) return true;
    const auto status = rig::child::wait_for(pid_, ms);
    if (!status) return false;
    status_ = *status;
    reaped_ = true;
    return true;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  std::string out_buf_, err_buf_;
  int status_ = 0;
  bool reaped_ = false;
};

// A "NAME:  N kB" field of /proc/PID/status (VmRSS, VmHWM: the resident set now and at its
// peak), in KiB; -1 if the process or the field is not there.
inline long proc_status_kib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with(field + ":")) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Whether process `pid` still exists (a zombie counts as gone: it runs nothing).
inline bool process_exists(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all;
  if (!std::getline(f, all)) return false;
  const auto close_paren = all.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < all.size() &&
         all[close_paren + 2] != 'Z';
}

// Waits up to `ms` for process `pid` to be gone; whether it is.
inline bool gone_within(pid_t pid, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (process_exists(pid)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    usleep(1000);
  }
  return true;
}

}  // namespace rig::test
