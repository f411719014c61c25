// Real processes for integration tests: spawn with pipes, read lines with a deadline, signal,
// reap. No test sleeps for an outcome: each waits for an event with a bound.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace rig::test {

class Process {
 public:
  // Starts `argv` with stdout and stderr on pipes; `env_extra` ("NAME=VALUE") adds to the
  // environment; `keep_fds` stay open in the child.
  explicit Process(const std::vector<std::string>& argv,
                   const std::vector<std::string>& env_extra = {},
                   const std::vector<int>& keep_fds = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
    for (int fd : keep_fds) fcntl(fd, F_SETFD, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) env_store.emplace_back(*e);
    for (const auto& e : env_extra) env_store.push_back(e);
    std::vector<char*> env;
    for (auto& e : env_store) env.push_back(e.data());
    env.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    for (int fd : keep_fds) fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
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
  std::optional<std::string> line(int ms = 10'000) { return read_line(out_, out_buf_, ms); }
  // The next line of stderr.
  std::optional<std::string> err_line(int ms = 10'000) { return read_line(err_, err_buf_, ms); }
  // stderr lines until one contains `needle`, within `ms`; that line.
  std::optional<std::string> err_until(const std::string& needle, int ms = 10'000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            until - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return std::nullopt;
      auto l = err_line(static_cast<int>(left));
      if (!l) return std::nullopt;
      if (l->find(needle) != std::string::npos) return l;
    }
  }

  void signal(int sig) { kill(pid_, sig); }
  // The exit status (as waitpid gives it).
  int wait() {
    if (reaped_) return status_;
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status_;
  }
  // Waits up to `ms` for the process to end; whether it did.
  bool wait_for(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      const pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        return true;
      }
      usleep(2000);
    }
    return false;
  }

 private:
  static std::optional<std::string> read_line(int fd, std::string& buf, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      const std::size_t nl = buf.find('\n');
      if (nl != std::string::npos) {
        std::string l = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return l;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            until - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(fd, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf.append(chunk, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  std::string out_buf_, err_buf_;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace rig::test
