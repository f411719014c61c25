// rig run as the tests run it: the real rig and rigd, with rigd started through a wrapper that
// notes each agent's pid, so that a test can see that no agent is left running.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "support/job_fixtures.hpp"
#include "support/process.hpp"

namespace rig::test {

// One `rig run --local N ... -- PROGRAM`. Owner: the test. Thread: the test's. Lifetime: the
// scope; at its end rig run and every agent it started that still runs are killed.
class RigRun {
 public:
  // `options` go between "run" and "--"; `tag` names the test's files.
  RigRun(const std::string& tag, int agents, const std::vector<std::string>& options,
         const std::vector<std::string>& program) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("rig-test-" + std::to_string(getpid()));
    fs::create_directories(dir);
    pid_file_ = dir / (tag + ".pids");
    fs::remove(pid_file_);
    const fs::path wrapper = dir / (tag + "-rigd.sh");
    std::ofstream(wrapper) << "#!/bin/sh\necho $$ >> '" << pid_file_.string() << "'\nexec '"
                           << env("RIG_RIGD") << "' \"$@\"\n";
    fs::permissions(wrapper, fs::perms::owner_all);
    std::vector<std::string> argv = {env("RIG_RIG"),         "run",    "--local",
                                     std::to_string(agents), "--rigd", wrapper.string()};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), program.begin(), program.end());
    started_ = std::chrono::steady_clock::now();
    p = std::make_unique<Process>(argv);
  }
  ~RigRun() {
    p.reset();
    for (pid_t pid : agent_pids()) kill(pid, SIGKILL);
  }
  RigRun(const RigRun&) = delete;
  RigRun& operator=(const RigRun&) = delete;

  std::chrono::steady_clock::time_point started() const { return started_; }

  // The agents' pids, in the order they started (agent0 first).
  std::vector<pid_t> agent_pids() const {
    std::vector<pid_t> pids;
    std::ifstream in(pid_file_);
    for (pid_t pid; in >> pid;) pids.push_back(pid);
    return pids;
  }
  // Those of them still running (or not yet reaped).
  std::vector<pid_t> agents_left() const {
    std::vector<pid_t> left;
    for (pid_t pid : agent_pids()) {
      if (kill(pid, 0) == 0 || errno != ESRCH) left.push_back(pid);
    }
    return left;
  }
  // What rig run printed on stdout, and whether it has ended, within `seconds` from now.
  struct End {
    std::string out;
    bool ended = false;
  };
  End end_within(double seconds) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
    auto left_ms = [&] {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
    };
    End end;
    while (auto l = p->line(left_ms())) end.out += *l + "\n";
    end.ended = p->wait_for(left_ms());
    return end;
  }

  std::unique_ptr<Process> p;

 private:
  std::filesystem::path pid_file_;
  std::chrono::steady_clock::time_point started_;
};

// The lines rig run itself printed (not its controller's).
inline std::vector<std::string> rig_run_lines(const std::string& out) {
  std::vector<std::string> mine;
  std::size_t at = 0;
  for (std::size_t nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = out.substr(at, nl - at);
    if (line.starts_with("rig run: ")) mine.push_back(line);
  }
  return mine;
}

// Checks rig run's lines for a job that agent0's loss failed: `agent0` is its line; the others
// name `cause` (which of agent1 and the controller saw it first, and so whose words come first,
// is a race).
inline void check_agent0_failed_the_job(const std::string& out, const std::string& agent0,
                                        const std::string& cause) {
  const auto lines = rig_run_lines(out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].starts_with("rig run: controller failed "));
  CHECK(lines[0].ends_with(cause));
  CHECK(lines[1] == "rig run: agent0     " + agent0);
  CHECK(lines[2].starts_with("rig run: agent1     failed "));
  CHECK(lines[2].ends_with(cause));
  CHECK(lines[3].starts_with("rig run: the job failed: "));
  CHECK(lines[3].ends_with(cause));
}

}  // namespace rig::test
