// rig run's ends, with the real rig and rigd (DESIGN.md "Launching": rig run never waits on a
// process that is gone, nor forever on one that says nothing). Each test asserts rig run's exact
// lines, its exit status, the bound on its end and that no agent is left running. Where a bound
// follows the liveness times, rig run and its processes run them scaled down by 10
// (--test-timing-divisor); slow_test.cpp has the real ones.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/job_fixtures.hpp"
#include "support/rig_run.hpp"

using rig::test::check_agent0_failed_the_job;
using rig::test::gone_within;
using rig::test::RigRun;
using rig::test::sanitizer_slowdown;
using rig::test::seconds_since;

namespace {

constexpr int divisor = 10;  // rig run's 11 s for an agent become 1.1 s, SIGKILL's 2 s 0.2 s
const std::vector<std::string> scaled = {"--test-timing-divisor", std::to_string(divisor)};

// A controller that ignores SIGINT and starts a `sleep 30` that ignores it too, whose pid it
// writes to a file named after `tag`; it prints "ready", then waits.
struct DeafController {
  std::string pid_file;
  std::vector<std::string> argv;
  explicit DeafController(const std::string& tag)
      : pid_file(std::filesystem::temp_directory_path() / ("rig-test-" + std::to_string(getpid())) /
                 (tag + ".pid")),
        argv{"/bin/sh", "-c",
             "trap '' INT; sleep 30 >/dev/null 2>&1 & echo $! > '" + pid_file +
                 "'; echo ready; wait"} {}
  // Checks that the sleep has gone (rig run killed it with the controller), and kills it if not.
  void check_child_gone() const {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    in >> pid;
    REQUIRE(pid > 0);
    CHECK_MESSAGE(gone_within(pid, static_cast<int>(1000 * sanitizer_slowdown)),
                  "the controller's child outlived it");
    kill(pid, SIGKILL);
  }
};

}  // namespace

TEST_CASE("rig run: a controller that ends before the job starts ends it at once, saying how") {
  struct Case {
    std::string tag;
    std::vector<std::string> program;
    std::string how;
  };
  const std::string grandchild = std::filesystem::temp_directory_path() /
                                 ("rig-test-" + std::to_string(getpid())) / "grandchild.pid";
  const std::vector<Case> cases = {
      {"true", {"/bin/true"}, "exited with status 0"},
      {"false", {"/bin/false"}, "exited with status 1"},
      {"killed", {"/bin/sh", "-c", "kill -9 $$"}, "was killed by signal 9 (Killed)"},
      // A process it leaves behind holds its report open: rig run waits on the controller's
      // exit, not on that pipe.
      {"leftover",
       {"/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > '" + grandchild + "'; exit 3"},
       "exited with status 3"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.tag);
    RigRun run("before-start-" + c.tag, 2, {}, c.program);
    // From rig run's start: two agents start, the controller ends, the agents get SIGTERM at
    // once and exit within a tick. 3 s is ample on a loaded machine.
    const double bound_s = 3.0 * sanitizer_slowdown;
    const auto [out, ended] = run.end_within(bound_s);
    const double elapsed = seconds_since(run.started());
    CHECK_MESSAGE(ended, "rig run still running after " << bound_s << " s");
    CHECK(elapsed < bound_s);
    const std::string why = "the controller " + c.how + " before the job started";
    CHECK(out == "rig run: controller " + c.how + " before the job started\n" +
                     "rig run: agent0     stopped, as the job did not start\n" +
                     "rig run: agent1     stopped, as the job did not start\n" +
                     "rig run: the job failed: " + why + "\n");
    if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
    CHECK(run.agent_pids().size() == 2);
    CHECK(run.agents_left().empty());
  }
  std::ifstream in(grandchild);
  if (pid_t pid = 0; in >> pid) kill(pid, SIGKILL);
}

TEST_CASE("rig run: an agent killed while the job runs is named, and rig run ends at once") {
  RigRun run("agent-killed", 2, scaled,
             {rig::test::env("RIG_TEST_LAUNCHED"), "--timing-divisor", std::to_string(divisor)});
  REQUIRE(run.p->line() == "started");
  const auto agents = run.agent_pids();
  REQUIRE(agents.size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  kill(agents[0], SIGKILL);
  // The controller hears the loss at once; its close and agent1's drain take at most the drain's
  // 1 s (scaled), then 1 s of margin for a loaded machine.
  const double bound_s = 2.0 * sanitizer_slowdown;
  const auto [out, ended] = run.end_within(bound_s);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the kill");
  CHECK(seconds_since(t0) < bound_s);
  check_agent0_failed_the_job(out,
                              "was killed by signal 9 (Killed) without reporting the job's end",
                              "agent0: closed its connection");
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  CHECK(run.agents_left().empty());
}

TEST_CASE("rig run: an agent that goes silent is stopped 1.1 s after the controller ends") {
  RigRun run("agent-silent", 2, scaled,
             {rig::test::env("RIG_TEST_LAUNCHED"), "--timing-divisor", std::to_string(divisor)});
  REQUIRE(run.p->line() == "started");
  const auto agents = run.agent_pids();
  REQUIRE(agents.size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  kill(agents[0], SIGSTOP);
  // The job fails after 1 s of silence; the controller's close drains for at most 1 s; agent0,
  // still running 1.1 s after the controller's end, gets SIGTERM, which a stopped process does
  // not act on, and SIGKILL 0.2 s later. Then 1 s of margin.
  const double earliest_s = 1.0 + 1.1 + 0.2;
  const double bound_s = (earliest_s + 1.0 + 1.0) * sanitizer_slowdown;
  const auto [out, ended] = run.end_within(bound_s);
  const double elapsed = seconds_since(t0);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the SIGSTOP");
  CHECK(elapsed >= earliest_s);
  CHECK(elapsed < bound_s);
  check_agent0_failed_the_job(
      out, "stopped, still running 1.1 s after the controller ended (killed 0.2 s after SIGTERM)",
      "agent0: sent nothing for 1 s");
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  CHECK(run.agents_left().empty());
}

TEST_CASE("rig run: a job that closes in order ends with 0 and every process closed") {
  RigRun run("closes", 2, {}, {rig::test::env("RIG_TEST_LAUNCHED"), "--hold-ms", "0"});
  const auto [out, ended] = run.end_within(10.0);
  REQUIRE(ended);
  CHECK(out ==
        "started\nclosed\nrig run: controller closed\nrig run: agent0     closed\n"
        "rig run: agent1     closed\nrig run: the job closed\n");
  CHECK(WEXITSTATUS(run.p->wait()) == 0);
  CHECK(run.agents_left().empty());
}

TEST_CASE("rig run: a second Ctrl-C kills a controller that ignores the first") {
  const DeafController controller("interrupted");
  RigRun run("interrupted", 2, {}, controller.argv);
  REQUIRE(run.p->line() == "ready");
  run.p->signal(SIGINT);
  // The first is passed on: the agents, serving no job yet, end; the controller ignores it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!run.agents_left().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(run.agents_left().empty());
  const auto t0 = std::chrono::steady_clock::now();
  run.p->signal(SIGINT);
  const double bound_s = 1.0 * sanitizer_slowdown;
  const auto [out, ended] = run.end_within(bound_s);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the second SIGINT");
  CHECK(seconds_since(t0) < bound_s);
  CHECK(out ==
        "rig run: controller killed, as rig run was interrupted twice\n"
        "rig run: agent0     exited with status 1 without reporting the job's end\n"
        "rig run: agent1     exited with status 1 without reporting the job's end\n"
        "rig run: the job failed: rig run was interrupted twice\n");
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  // What the controller started goes with it, though it ignores SIGINT too.
  controller.check_child_gone();
}

TEST_CASE(
    "rig run: a controller that ignores a Ctrl-C is killed 1.1 s after it, with its children") {
  const DeafController controller("unheeded");
  RigRun run("unheeded", 2, scaled, controller.argv);
  REQUIRE(run.p->line() == "ready");
  const auto t0 = std::chrono::steady_clock::now();
  run.p->signal(SIGINT);
  // The agents, serving no job yet, end at once; the controller ignores SIGINT and is killed,
  // with the sleep it started, once the drain's bound and a second (1.1 s, scaled) have passed.
  const double earliest_s = 1.1;
  const double bound_s = (earliest_s + 1.0) * sanitizer_slowdown;
  const auto [out, ended] = run.end_within(bound_s);
  const double elapsed = seconds_since(t0);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the SIGINT");
  CHECK(elapsed >= earliest_s);
  CHECK(elapsed < bound_s);
  CHECK(out ==
        "rig run: controller killed, still running 1.1 s after rig run was interrupted\n"
        "rig run: agent0     exited with status 1 without reporting the job's end\n"
        "rig run: agent1     exited with status 1 without reporting the job's end\n"
        "rig run: the job failed: the controller killed, still running 1.1 s after rig run was "
        "interrupted\n");
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  controller.check_child_gone();
}

TEST_CASE("rig run: a controller stopped when its agents end is killed 1.1 s after their end") {
  RigRun run("controller-stopped", 2, scaled,
             {rig::test::env("RIG_TEST_LAUNCHED"), "--timing-divisor", std::to_string(divisor)});
  REQUIRE(run.p->line() == "started");
  // The controller: rig run's child that is not an agent.
  const auto agents = run.agent_pids();
  pid_t controller = 0;
  std::ifstream children("/proc/" + std::to_string(run.p->pid()) + "/task/" +
                         std::to_string(run.p->pid()) + "/children");
  for (pid_t child; children >> child;) {
    if (std::find(agents.begin(), agents.end(), child) == agents.end()) controller = child;
  }
  REQUIRE(controller > 0);
  const auto t0 = std::chrono::steady_clock::now();
  kill(controller, SIGSTOP);
  // The agents hear nothing for 1 s and fail the job, drain for at most 1 s and exit; 1.1 s
  // after their end the stopped controller is killed. Then 1 s of margin.
  const double earliest_s = 1.0 + 1.1;
  const double bound_s = (1.0 + 1.0 + 1.1 + 1.0) * sanitizer_slowdown;
  const auto [out, ended] = run.end_within(bound_s);
  const double elapsed = seconds_since(t0);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the SIGSTOP");
  CHECK(elapsed >= earliest_s);
  CHECK(elapsed < bound_s);
  const auto lines = rig::test::rig_run_lines(out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "rig run: controller killed, stopped 1.1 s after the agents ended");
  // Which agent hears the silence first, and so whose words the other's abort carries, is a
  // race.
  for (const std::string agent : {"agent0", "agent1"}) {
    const std::string& line = lines[agent == "agent0" ? 1 : 2];
    CHECK(line.starts_with("rig run: " + agent + "     failed "));
    CHECK(line.ends_with("controller: sent nothing for 1 s"));
  }
  // The controller's silence, which the agents saw first, is the root cause, not rig run's kill.
  CHECK(lines[3].starts_with("rig run: the job failed: "));
  CHECK(lines[3].ends_with("controller: sent nothing for 1 s"));
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  CHECK(run.agents_left().empty());
}

TEST_CASE("rig run: a report line that would drive the terminal is printed escaped") {
  // A controller that writes its own end line, with an escape code that would clear the screen.
  RigRun run(
      "forged-report", 1, {},
      {"/bin/bash", "-c", "printf 'failed bad\\033[2J\\n' >&\"$RIG_REMOTE_REPORT\"; exit 1"});
  const auto [out, ended] = run.end_within(5.0 * sanitizer_slowdown);
  CHECK(ended);
  CHECK(out ==
        "rig run: controller failed bad\\x1b[2J\n"
        "rig run: agent0     stopped, as the job did not start\n"
        "rig run: the job failed: bad\\x1b[2J\n");
  CHECK(run.agents_left().empty());
}

TEST_CASE("rig run: the job's key is in no file, so a rig run killed by SIGKILL leaves none") {
  namespace fs = std::filesystem;
  const fs::path tmp =
      fs::temp_directory_path() / ("rig-test-" + std::to_string(getpid())) / "key-tmpdir";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // Wherever rig run would make a temporary file, it makes it here.
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  RigRun run("key-nowhere", 2, {}, {rig::test::env("RIG_TEST_LAUNCHED")});
  if (old_tmpdir) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  REQUIRE(run.p->line() == "started");
  // The agents took the key on their stdin: no path to a key is on their command lines.
  const auto agents = run.agent_pids();
  REQUIRE(agents.size() == 2);
  for (pid_t pid : agents) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    CAPTURE(cmdline);
    CHECK(cmdline.find(" --key - ") != std::string::npos);
  }
  run.p->signal(SIGKILL);
  run.p->wait();
  // The fixture's own files are there too (it makes them under TMPDIR): none of rig run's.
  for (const auto& entry : fs::recursive_directory_iterator(tmp)) {
    CAPTURE(entry.path());
    CHECK(entry.path().filename().string().find("rig-run") == std::string::npos);
    CHECK(entry.path().filename() != "job.key");
  }
  for (pid_t pid : agents) kill(pid, SIGKILL);
  fs::remove_all(tmp);
}
