// rig run --slurm in a real Slurm (Debian's slurm-wlm and munge): three nodes in network and UTS
// namespaces (net.hpp), the remote example through salloc and through sbatch, the failures to
// start with their exact messages, exit statuses and nothing left on any node, a node lost while
// the job runs (named by every process, before Slurm notices), and the ends a user makes (scancel,
// Ctrl-C).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "child/child.hpp"
#include "net.hpp"

using namespace rig::test;

namespace {

constexpr int node_end_ms = 5'000;      // a node's rigd ends with its srun's stdin
constexpr int scancel_end_ms = 12'000;  // the issue's bound on a scancel's end on every node
// A job with a node gone fails within the liveness bound (10 s of silence) and a margin.
constexpr int job_fail_bound_ms = 12'000;
// After a Ctrl-C, rig run ends the sessions' stdin: each rigd stops within 200 ms, its srun ends
// with it; the rest is room for a loaded machine.
constexpr int interrupt_end_ms = 5'000;

std::vector<std::string> rig_slurm(const std::string& rigd) {
  return {env("RIG_TEST_RIG"),  "run", "--slurm", "--rigd", rigd, "--", env("RIG_TEST_EXAMPLE"),
          env("RIG_TEST_SAXPY")};
}

std::vector<std::string> in_salloc(int nodes, const std::vector<std::string>& argv) {
  std::vector<std::string> out = {"salloc", "--quiet", "-N", std::to_string(nodes)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string last_rig_line(const std::string& err) {
  std::string found;
  for (std::size_t at = 0; at < err.size();) {
    const std::size_t nl = std::min(err.find('\n', at), err.size());
    if (err.compare(at, 9, "rig run: ") == 0) found = err.substr(at, nl - at);
    at = nl + 1;
  }
  return found;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    if (text.compare(at, prefix.size(), prefix) == 0) found.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return found;
}

// What Slurm says of `node`'s state (scontrol's State=, "MIXED", "IDLE+NOT_RESPONDING").
std::string slurm_state(const Net& net, const std::string& node) {
  const Ran r = net.run({"scontrol", "--oneliner", "show", "node", node}, run_timeout_ms);
  const std::size_t at = r.out.find(" State=");
  if (at == std::string::npos) return "(scontrol said: " + r.out + r.err + ")";
  const std::size_t from = at + std::string(" State=").size();
  return r.out.substr(from, r.out.find(' ', from) - from);
}

// The pid of a process on `node` whose command line holds `word`, or -1.
pid_t process_on(const Net& net, const std::string& node, const std::string& word) {
  for (const pid_t pid : net.strays_of(node)) {
    if (read_file("/proc/" + std::to_string(pid) + "/cmdline").find(word) != std::string::npos) {
      return pid;
    }
  }
  return -1;
}

// The pid of the rigd on `node` (its srun step's task), or -1.
pid_t rigd_on(const Net& net, const std::string& node) {
  return process_on(net, node, "--watch-stdin");
}

// A "rigd" for --rigd that is the real one on n1 and n2, and on n3 a program that prints nothing
// and ends with its stdin (cat), as a rigd stuck before its listening line would.
std::string silent_on_n3(const Net& net) {
  const std::string path = net.dir() + "/half";
  std::ofstream(path) << "#!/bin/sh\nif [ \"$SLURMD_NODENAME\" != n3 ]; then exec '"
                      << env("RIG_TEST_RIGD") << "' \"$@\"; fi\nexec cat >/dev/null\n";
  chmod(path.c_str(), 0755);
  return path;
}

// The first child of `parent` (the command salloc runs), or -1.
pid_t child_of(pid_t parent) {
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(parent) + "/task", ec)) {
    std::ifstream in(task.path() / "children");
    if (pid_t child = -1; in >> child) return child;
  }
  return -1;
}

void check_closed(const std::string& out) {
  CHECK(out.find("every element checked on 6 SIM devices of 3 machines; closed the job") !=
        std::string::npos);
  for (const char* node : {"n1", "n2", "n3"}) {
    CHECK(out.find("SIM:0@" + std::string(node)) != std::string::npos);
    CHECK(out.find("rig run: " + std::string(node) + "         closed\n") != std::string::npos);
  }
  CHECK(out.find("rig run: the job closed\n") != std::string::npos);
}

}  // namespace

TEST_CASE("rig run --slurm: the remote example on three nodes, from inside salloc") {
  Net net(Net::Engine::slurm);
  const Ran r = net.run(in_salloc(3, rig_slurm(env("RIG_TEST_RIGD"))), run_timeout_ms);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == 0);
  check_closed(r.out);
  CHECK(r.err.find("n2: rigd[") != std::string::npos);
  CHECK(net.no_strays_within(node_end_ms));
}

TEST_CASE("rig run --slurm: the remote example through sbatch") {
  Net net(Net::Engine::slurm);
  const std::string out = net.dir() + "/sbatch.out";
  std::string wrap;
  for (const std::string& word : rig_slurm(env("RIG_TEST_RIGD"))) wrap += "'" + word + "' ";
  const Ran r = net.run({"sbatch", "--wait", "--quiet", "-N", "3", "-o", out, "--wrap", wrap},
                        run_timeout_ms);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO("sbatch:\n" << r.out << r.err << "job's output:\n" << text);
  CHECK(r.status == 0);
  check_closed(text);
  CHECK(net.no_strays_within(node_end_ms));
}

TEST_CASE(
    "rig run --slurm: each failure to start: rigd missing or not executable on the nodes, srun's "
    "own refusal, a node that reports no address within 10 s, a NodeAddr that does not resolve") {
  Net net(Net::Engine::slurm);
  const std::string missing = net.dir() + "/no-rigd";
  const std::string plain = net.dir() + "/plain";
  std::ofstream(plain) << "not a program\n";
  chmod(plain.c_str(), 0600);
  // srun runs env by its path; env's words come back through srun's stderr.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {missing, "rig run: n1: rigd '" + missing + "' is not there: /usr/bin/env: '" + missing +
                    "': No such file or directory"},
      {plain, "rig run: n1: rigd '" + plain + "' cannot be run: /usr/bin/env: '" + plain +
                  "': Permission denied"},
  };
  for (const auto& [rigd, message] : cases) {
    const Ran r = net.run(in_salloc(3, rig_slurm(rigd)), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_no_rigd);
    CHECK(last_rig_line(r.err) == message);
    CHECK(r.out.empty());
    CHECK(net.no_strays_within(node_end_ms));
  }
  {
    // A node outside the allocation: srun refuses the step, in its words; the others stop.
    const Ran r =
        net.run(in_salloc(2, {"env", "SLURM_JOB_NODELIST=n[1-3]", env("RIG_TEST_RIG"), "run",
                              "--slurm", "--rigd", env("RIG_TEST_RIGD"), "--", "true"}),
                run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_srun);
    CHECK(
        last_rig_line(r.err).starts_with("rig run: n3: srun exited with status 1: srun: error: "));
    CHECK(net.no_strays_within(node_end_ms));
  }
  {
    // n3 prints no address: the start ends there, at 10 s.
    const Ran r = net.run(in_salloc(3, rig_slurm(silent_on_n3(net))), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_agent_silent);
    CHECK(last_rig_line(r.err) == "rig run: n3: no address within 10 s");
    CHECK(r.seconds >= 10);
    CHECK(r.seconds < 10 + 5);  // the bound, salloc's start and the stop of n1's and n2's agents
    CHECK(r.out.empty());
    CHECK(net.no_strays_within(node_end_ms));
  }
  {
    // Slurm knows n3 by a name that does not resolve here: nothing starts on any node, and rig
    // never falls back to another address (the node's name, or loopback). Last: Slurm cannot
    // reach n3 from now on.
    const Ran update =
        net.run({"scontrol", "update", "NodeName=n3", "NodeAddr=n3-ib.invalid"}, run_timeout_ms);
    REQUIRE_MESSAGE(update.status == 0, update.out << update.err);
    const Ran r = net.run(in_salloc(3, rig_slurm(env("RIG_TEST_RIGD"))), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_unresolved);
    const std::string prefix =
        "rig run: n3 (its NodeAddr n3-ib.invalid): the name does not resolve: ";
    const std::string line = last_rig_line(r.err);
    CHECK(line.starts_with(prefix));
    CHECK(line.size() > prefix.size());  // the system's reason
    CHECK(r.out.empty());
    CHECK(r.err.find("rigd[") == std::string::npos);  // no agent started
    CHECK(net.no_strays_within(node_end_ms));
  }
}

TEST_CASE("rig run --slurm: a scancel of the job leaves no rigd on any node within 12 s") {
  Net net(Net::Engine::slurm);
  // A controller that names the job, then waits for its stdin's end: it runs where rig run runs,
  // outside the allocation, so the scancel does not reach it.
  const std::string controller = net.dir() + "/controller";
  { std::ofstream(controller) << "#!/bin/sh\necho \"$SLURM_JOB_ID\"\nread line\n"; }
  chmod(controller.c_str(), 0700);
  int in[2], out[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  const pid_t salloc = net.start(in_salloc(3, {env("RIG_TEST_RIG"), "run", "--slurm", "--rigd",
                                               env("RIG_TEST_RIGD"), "--", controller}),
                                 in[0], out[1], -1);
  close(in[0]);
  close(out[1]);
  std::string pending;
  const auto job = rig::child::read_line(out[0], pending, run_timeout_ms);
  REQUIRE(job);
  REQUIRE(!job->empty());
  CHECK(!net.strays().empty());  // the nodes' rigds, and their slurmstepd
  const Ran cancel = net.run({"scancel", *job}, run_timeout_ms);
  CHECK(cancel.status == 0);
  CHECK(net.no_strays_within(scancel_end_ms));
  close(in[1]);  // the controller ends; rig run names each node's end
  const auto ended = rig::child::wait_for(salloc, run_timeout_ms);
  if (!ended) kill(salloc, SIGKILL);
  CHECK(ended);
  const std::string rest = pending + rig::child::read_all(out[0]);
  close(out[0]);
  for (const char* node : {"n1", "n2", "n3"}) {
    CHECK(rest.find("rig run: " + std::string(node) +
                    "         exited with status 1 without reporting the job's end\n") !=
          std::string::npos);
  }
}

TEST_CASE(
    "rig run --slurm: a node whose rigd is killed, or that falls silent, fails the job in 10 s, "
    "before Slurm notices") {
  struct Case {
    std::string what;
    std::string node;   // the one that goes
    bool blackhole;     // else kill -9 of its rigd
    std::string cause;  // the job's root cause, named by the node
  };
  // One cluster for both: a kill -9 leaves the node as Slurm had it.
  Net net(Net::Engine::slurm);
  for (const Case& c : {Case{"kill -9 of n2's rigd", "n2", false, "n2: closed its connection"},
                        Case{"n3 blackholed (nft drops what it sends and receives)", "n3", true,
                             "n3: sent nothing for 10 s"}}) {
    CAPTURE(c.what);
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    const std::string err_path = net.dir() + "/" + c.node + ".err";
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    // A controller that holds the job until it fails, and says when.
    const pid_t salloc =
        net.start(in_salloc(3, {env("RIG_TEST_RIG"), "run", "--slurm", "--rigd",
                                env("RIG_TEST_RIGD"), "--", env("RIG_TEST_LAUNCHED")}),
                  null_fd, out[1], err_fd);
    for (const int fd : {null_fd, err_fd, out[1]}) close(fd);
    std::string pending;
    REQUIRE(rig::child::read_line(out[0], pending, run_timeout_ms) == "started");
    const auto t0 = std::chrono::steady_clock::now();
    if (c.blackhole) {
      net.blackhole(c.node, true);
    } else {
      const pid_t victim = rigd_on(net, c.node);
      REQUIRE(victim > 0);
      kill(victim, SIGKILL);
    }
    // The controller's failure, within the liveness bound and a margin. It sees the node's end
    // itself or first hears it in another agent's abort ("n1 aborted: n3: ..."): a race, and
    // either names the node.
    const auto failed = rig::child::read_line(out[0], pending, job_fail_bound_ms);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Slurm, meanwhile, still counts the node as up: it never notices a task that died of its own,
    // and a silent node only once a ping has gone unanswered for MessageTimeout (10 s); here it
    // marked n3 NOT_RESPONDING 15 to 19 s after the blackhole, and DOWN at about 30 s.
    const std::string state = slurm_state(net, c.node);
    INFO("Slurm's state of " << c.node << ": " << state);
    CHECK(state.find("NOT_RESPONDING") == std::string::npos);
    CHECK(state.find("DOWN") == std::string::npos);
    // The job may be ending already: the controller exits once it has said why, rig run then, and
    // salloc gives the nodes back (IDLE+COMPLETING was seen here for n2 after the kill -9).
    CHECK((state.starts_with("MIXED") || state.starts_with("ALLOCATED") ||
           state.starts_with("IDLE")));
    // The node comes back: its rigd, failed by then, and its step end as they would on their own.
    if (c.blackhole) net.blackhole(c.node, false);
    REQUIRE(failed);
    CHECK(failed->starts_with("failed: "));
    CHECK(failed->ends_with(c.cause));
    CHECK(seconds < job_fail_bound_ms / 1000.0);
    const auto status = rig::child::wait_for(salloc, run_timeout_ms);
    if (!status) kill(salloc, SIGKILL);
    REQUIRE(status);
    const std::string rest = pending + rig::child::read_all(out[0]);
    close(out[0]);
    const std::string log = read_file(err_path);
    INFO("rig run said:\n" << rest << "its stderr:\n" << log);
    // Every process that reports names the node in its cause: the controller, each surviving
    // node's agent in its report and in its log, and rig run's root cause.
    const auto controller = lines_starting(rest, "rig run: controller ");
    REQUIRE(controller.size() == 1);
    CHECK(controller[0].ends_with(c.cause));
    for (const std::string node : {"n1", "n2", "n3"}) {
      if (node == c.node) continue;
      CAPTURE(node);
      const auto report = lines_starting(rest, "rig run: " + node + " ");
      REQUIRE(report.size() == 1);
      CHECK(report[0].find(" failed ") != std::string::npos);
      CHECK(report[0].ends_with(c.cause));
      bool logged = false;
      for (const std::string& line : lines_starting(log, node + ": rigd[")) {
        logged = logged ||
                 (line.find("]: job: failed ") != std::string::npos && line.ends_with(c.cause));
      }
      CHECK(logged);
    }
    const auto root = lines_starting(rest, "rig run: the job failed: ");
    REQUIRE(root.size() == 1);
    CHECK(root[0].ends_with(c.cause));
    CHECK(net.no_strays_within(node_end_ms));
  }
}

TEST_CASE(
    "rig run --slurm: a Ctrl-C of rig run, while the agents start or once the job runs, ends every "
    "process of the job on every node") {
  Net net(Net::Engine::slurm);
  // rig run's own files (its agents' logs) go here: nothing may be left in it.
  const std::string tmp = net.dir() + "/tmp";
  std::filesystem::create_directory(tmp);
  {
    // n3 says nothing: rig run is waiting for its address when the Ctrl-C comes. It must neither
    // sit out the 10 s nor start the controller.
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    const std::string err_path = net.dir() + "/start.err";
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<std::string> argv = {"env", "TMPDIR=" + tmp};
    for (const std::string& word : rig_slurm(silent_on_n3(net))) argv.push_back(word);
    const pid_t salloc = net.start(in_salloc(3, argv), null_fd, out[1], err_fd);
    for (const int fd : {null_fd, err_fd, out[1]}) close(fd);
    // Every node's program runs (there is no event to wait on but the look).
    auto starting = [&] {
      return rigd_on(net, "n1") > 0 && rigd_on(net, "n2") > 0 && process_on(net, "n3", "cat") > 0;
    };
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_timeout_ms);
    bool started = false;
    while (!(started = starting()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(started);
    const pid_t rig = child_of(salloc);
    REQUIRE(rig > 0);
    const auto t0 = std::chrono::steady_clock::now();
    kill(rig, SIGINT);
    const auto ended = rig::child::wait_for(salloc, interrupt_end_ms);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ended) kill(salloc, SIGKILL);
    const std::string said = rig::child::read_all(out[0]);
    close(out[0]);
    const std::string err = read_file(err_path);
    INFO("stdout:\n" << said << "stderr:\n" << err << "in " << seconds << " s");
    REQUIRE_MESSAGE(ended, "rig run still running " << interrupt_end_ms << " ms after a Ctrl-C");
    CHECK(WIFEXITED(*ended));
    CHECK(WEXITSTATUS(*ended) == exit_failure);
    CHECK(last_rig_line(err) ==
          "rig run: interrupted while the agents started; every agent started is stopped");
    CHECK(said.empty());  // no controller ran
    CHECK(net.no_strays_within(node_end_ms));
    CHECK(std::filesystem::is_empty(tmp));
  }
  // A controller that names rig run and the key, then starts the job and holds it.
  const std::string controller = net.dir() + "/controller";
  {
    std::ofstream(controller) << "#!/bin/sh\necho \"$PPID $RIG_REMOTE_KEY\"\nexec '"
                              << env("RIG_TEST_LAUNCHED") << "'\n";
  }
  chmod(controller.c_str(), 0700);
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t salloc =
      net.start(in_salloc(3, {"env", "TMPDIR=" + tmp, env("RIG_TEST_RIG"), "run", "--slurm",
                              "--rigd", env("RIG_TEST_RIGD"), "--", controller}),
                null_fd, out[1], -1);
  close(null_fd);
  close(out[1]);
  std::string pending;
  const auto named = rig::child::read_line(out[0], pending, run_timeout_ms);
  REQUIRE(named);
  std::smatch m;
  const std::string seen = *named;
  REQUIRE(std::regex_match(seen, m, std::regex(R"((\d+) ([0-9a-f]{64}))")));
  const pid_t rig = std::stoi(m[1]);
  const std::string key = m[2];
  REQUIRE(rig::child::read_line(out[0], pending, run_timeout_ms) == "started");
  // The job runs: a rigd on every node, and the key on none of their command lines or
  // environments.
  for (const char* node : {"n1", "n2", "n3"}) CHECK(rigd_on(net, node) > 0);
  CHECK(!std::filesystem::is_empty(tmp));  // the agents' logs, while they run
  for (const pid_t pid : net.strays()) {
    for (const char* what : {"cmdline", "environ"}) {
      CHECK_MESSAGE(
          read_file("/proc/" + std::to_string(pid) + "/" + what).find(key) == std::string::npos,
          "process " << pid << " on a node, its " << what);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  kill(rig, SIGINT);
  const auto ended = rig::child::wait_for(salloc, interrupt_end_ms);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ended) kill(salloc, SIGKILL);
  const std::string rest = pending + rig::child::read_all(out[0]);
  close(out[0]);
  INFO("rig run said:\n" << rest << "in " << seconds << " s");
  REQUIRE_MESSAGE(ended, "rig run still running " << interrupt_end_ms << " ms after a Ctrl-C");
  for (const char* node : {"n1", "n2", "n3"}) {
    CHECK(lines_starting(rest, "rig run: " + std::string(node) + " ").size() == 1);
  }
  CHECK(lines_starting(rest, "rig run: the job failed: ").size() == 1);
  // Nothing of the job is left on any node, nor a file of rig run's, nor the key in any file of
  // the cluster (its spool, its logs).
  CHECK(net.no_strays_within(node_end_ms));
  CHECK(std::filesystem::is_empty(tmp));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(net.dir())) {
    if (!entry.is_regular_file() || entry.path().filename() == "munge.key") continue;
    CHECK_MESSAGE(read_file(entry.path()).find(key) == std::string::npos, entry.path());
  }
}
