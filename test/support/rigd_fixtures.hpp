// What the tests of rigd itself share (its log, stop, key and job processes): a rigd whose stdin,
// stdout and stderr the test chooses, and a hand-made controller that proves the key and then
// neither reads nor closes.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "child/child.hpp"
#include "remote/io/address.hpp"
#include "remote/trust/handshake.hpp"
#include "support/job_fixtures.hpp"

namespace rig::test {

// A rigd on 127.0.0.1 port 0, started with `args` after its own path (no --listen: added here),
// stdin on `stdin_fd` (-1: this process's), stdout and stderr on pipes; a stderr pipe of
// `stderr_pipe_bytes` if not 0. Owner: the test; one thread. Lifetime: the scope; a rigd still
// running at the end is killed and reaped.
struct RigdProcess {
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string out_buf, err_buf;
  int port = 0;
  std::optional<int> status;

  explicit RigdProcess(const std::vector<std::string>& args, int stdin_fd = -1,
                       int stderr_pipe_bytes = 0) {
    int o[2], e[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0);
    REQUIRE(pipe2(e, O_CLOEXEC) == 0);
    if (stderr_pipe_bytes > 0) REQUIRE(fcntl(e[0], F_SETPIPE_SZ, stderr_pipe_bytes) > 0);
    rig::child::Spec spec;
    spec.argv = {env("RIG_RIGD"), "--listen", "127.0.0.1:0"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.stdin_fd = stdin_fd;
    spec.stdout_fd = o[1];
    spec.stderr_fd = e[1];
    const auto spawned = rig::child::spawn(spec);
    ::close(o[1]);
    ::close(e[1]);
    out = o[0];
    err = e[0];
    REQUIRE_MESSAGE(spawned.ok(), (spawned.ok() ? "" : spawned.error()));
    pid = *spawned;
  }
  ~RigdProcess() {
    if (!status) {
      kill(pid, SIGKILL);
      (void)rig::child::wait_exit(pid);
    }
    ::close(out);
    ::close(err);
  }
  RigdProcess(const RigdProcess&) = delete;
  RigdProcess& operator=(const RigdProcess&) = delete;

  // Reads the listening line; the port.
  int listening(int ms = 10'000) {
    const auto line = rig::child::read_line(out, out_buf, ms);
    REQUIRE_MESSAGE(line.has_value(), "rigd printed no listening line");
    const auto at = rig::remote::parse_listening_line(*line);
    REQUIRE_MESSAGE(at.ok(), *line);
    port = at->port;
    return port;
  }
  rig::remote::Address address() const { return {"127.0.0.1", port}; }
  std::optional<std::string> err_line(int ms = 10'000) {
    return rig::child::read_line(err, err_buf, ms);
  }
  // stderr lines until one contains `needle`, within `ms`; that line.
  std::optional<std::string> err_until(const std::string& needle, int ms = 10'000) {
    return line_until(err, err_buf, needle, ms);
  }
  // Every stderr line until its end (rigd's exit), within `ms`.
  std::vector<std::string> rest_of_log(int ms = 10'000) {
    std::vector<std::string> lines;
    while (auto l = err_line(ms)) lines.push_back(*l);
    return lines;
  }
  // Waits up to `ms` for rigd to exit; its status, or nothing.
  std::optional<int> wait_for(int ms) {
    if (!status) status = rig::child::wait_for(pid, ms);
    return status;
  }
  // The pid of the job process rigd runs now, from /proc, once within `ms` (the kernel lists a
  // child there from its fork on).
  std::optional<pid_t> child_pid(int ms = 10'000) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    const std::string path =
        "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children";
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream f(path);
      pid_t child = 0;
      if (f >> child) return child;
      usleep(50);
    }
    return std::nullopt;
  }
};

// A hand-made controller's handshake with the agent at `port`, as a job's controller holding
// `key`, to its end: the socket and the handshake, proven or refused.
inline std::pair<int, rig::remote::Handshake> dial_as_controller(int port,
                                                                 const rig::remote::Key& key) {
  const int s = connect_loopback(port);
  auto hs = rig::remote::Handshake::dialer(
      key, {rig::remote::Role::controller, "controller", rig::remote::new_job_id(), "agent",
            rig::remote::new_instance_id()});
  std::uint8_t buf[4096];
  while (!hs.done()) {
    const auto out = hs.take_output();
    REQUIRE(::send(s, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size()));
    const ssize_t n = ::read(s, buf, sizeof buf);
    REQUIRE(n > 0);
    (void)hs.feed({buf, static_cast<std::size_t>(n)});
  }
  return {s, std::move(hs)};
}

// A hand-made controller: connects to the agent at `port`, proves `key` as a job's controller,
// and returns the socket, on which it then neither reads nor sends (nor closes, until the caller
// does): a peer that will not end the job.
inline int prove_as_controller(int port, const rig::remote::Key& key) {
  auto [s, hs] = dial_as_controller(port, key);
  REQUIRE_MESSAGE(hs.state() == rig::remote::Handshake::State::proven, hs.why());
  return s;
}

}  // namespace rig::test
