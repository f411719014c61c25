// rigd --once --watch-stdin, the agent `rig run --ssh` starts: the key is stdin's first line, and
// the end of stdin (the session gone) stops the agent, within the bound of a stop.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "child/child.hpp"

namespace {

constexpr int start_timeout_ms = 10'000;
// A stop ends serve within 200 ms; the rest is room for a loaded machine.
constexpr int stop_timeout_ms = 3'000;

struct Agent {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
};

Agent start(const std::vector<std::string>& args) {
  const char* rigd = std::getenv("RIG_RIGD");
  REQUIRE(rigd != nullptr);
  int in[2], out[2], err[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(pipe2(err, O_CLOEXEC) == 0);
  rig::child::Spec spec;
  spec.argv = {rigd};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.stdin_fd = in[0];
  spec.stdout_fd = out[1];
  spec.stderr_fd = err[1];
  auto pid = rig::child::spawn(spec);
  for (int fd : {in[0], out[1], err[1]}) close(fd);
  REQUIRE(pid);
  return {*pid, in[1], out[0], err[0]};
}

const std::vector<std::string> watching = {"--key",  "-",        "--watch-stdin",
                                           "--once", "--listen", "127.0.0.1:0"};

}  // namespace

TEST_CASE("rigd --watch-stdin: the key is stdin's first line; stdin's end stops the agent") {
  Agent a = start(watching);
  const std::string key = std::string(64, 'k') + "\n";
  REQUIRE(write(a.in, key.data(), key.size()) == static_cast<ssize_t>(key.size()));
  std::string pending;
  const auto line = rig::child::read_line(a.out, pending, start_timeout_ms);
  REQUIRE(line);
  CHECK(line->starts_with("listening 127.0.0.1:"));
  // Still serving with stdin open: the key's line did not end it.
  CHECK_FALSE(rig::child::wait_for(a.pid, 100));
  const auto t0 = std::chrono::steady_clock::now();
  close(a.in);
  const auto status = rig::child::wait_for(a.pid, stop_timeout_ms);
  REQUIRE_MESSAGE(status, "rigd still running after its stdin ended");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(stop_timeout_ms));
  const std::string log = rig::child::read_all(a.err);
  CHECK(log.find("stdin ended (the launcher's session is gone): stopping\n") != std::string::npos);
  CHECK(log.find("job: interrupted\n") != std::string::npos);
  CHECK(WIFEXITED(*status));
  close(a.out);
  close(a.err);
}

TEST_CASE("rigd --watch-stdin: no key line, or without --once and --key -, is a usage error") {
  {
    Agent a = start(watching);
    close(a.in);  // ends before a line came
    const int status = rig::child::wait_exit(a.pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(rig::child::read_all(a.err).find(
              "key on stdin: no line came before its end or within 10 s (--watch-stdin takes the "
              "key as stdin's first line)") != std::string::npos);
    close(a.out);
    close(a.err);
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--key", "-", "--watch-stdin", "--listen", "127.0.0.1:0"},
        std::vector<std::string>{"--key", "/nonexistent", "--watch-stdin", "--once", "--listen",
                                 "127.0.0.1:0"}}) {
    Agent a = start(args);
    close(a.in);
    const int status = rig::child::wait_exit(a.pid);
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(rig::child::read_all(a.err).find("--watch-stdin needs --once and --key -") !=
          std::string::npos);
    close(a.out);
    close(a.err);
  }
}
