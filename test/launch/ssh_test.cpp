// rig run --ssh on a real sshd (Debian's openssh-server) in network namespaces (net.hpp): the
// remote example across two hosts, the key's way (ssh's stdin only), the agents' end with their
// sessions, and each failure to start with its exact message, its exit status and nothing left on
// any host.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "child/child.hpp"
#include "net.hpp"

using namespace rig::test;

namespace {

// How long a host may take to notice that its session ended and end its rigd: the end of the
// session's stdin, and rigd's stop (within 200 ms), with room for a loaded machine.
constexpr int host_end_ms = 5'000;
constexpr int agent_start_timeout_s = 10;  // rig run's bound on a host's address
// A job with a host gone fails within the liveness bound (10 s of silence) and a margin.
constexpr int job_fail_bound_ms = 12'000;

std::vector<std::string> rig_run(const std::string& hosts, const std::string& rigd,
                                 const std::vector<std::string>& program) {
  std::vector<std::string> argv = {
      env("RIG_TEST_RIG"), "run", "--ssh", hosts, "--rigd", rigd, "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::vector<std::string> example() {
  return {env("RIG_TEST_EXAMPLE"), env("RIG_TEST_SAXPY")};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void script(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  chmod(path.c_str(), 0700);
}

// The one line rig run wrote on its stderr that starts "rig run: ".
std::string failure_line(const Ran& r) {
  std::string found;
  std::size_t at = 0;
  while (at < r.err.size()) {
    const std::size_t nl = std::min(r.err.find('\n', at), r.err.size());
    const std::string line = r.err.substr(at, nl - at);
    if (line.starts_with("rig run: ")) found = line;
    at = nl + 1;
  }
  return found;
}

}  // namespace

TEST_CASE("rig run --ssh: the remote example on two hosts, named as given, over their addresses") {
  Net net;
  const Ran r = net.run(rig_run("node1,node2", env("RIG_TEST_RIGD"), example()), run_timeout_ms);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("every element checked on 4 SIM devices of 2 machines; closed the job") !=
        std::string::npos);
  for (const std::string host : {"node1", "node2"}) {
    // Each agent is named by its host as given, and runs there: the controller, in the launcher's
    // namespace, reached it at the host's own address.
    CHECK(r.out.find("SIM:0@" + host) != std::string::npos);
    CHECK(r.out.find("rig run: " + host + std::string(10 - host.size(), ' ') + " closed\n") !=
          std::string::npos);
    CHECK(std::regex_search(r.err, std::regex(host + R"(: rigd\[\d+\]: listening 198\.18\.0\.)" +
                                              host.substr(4) + R"(:\d+ kinds CPU,SIM)")));
    CHECK(std::regex_search(r.err, std::regex(host +
                                              R"(: rigd\[\d+\]: job: started by the )"
                                              R"(controller at 198\.18\.0\.254:\d+, which )"
                                              R"(names this agent )" +
                                              host)));
  }
  CHECK(r.out.find("rig run: the job closed\n") != std::string::npos);
  CHECK(net.no_strays_within(host_end_ms));
}

TEST_CASE(
    "rig run --ssh: the key is on no command line and in no environment but the controller's") {
  Net net;
  // A controller that shows what it was given and waits for its stdin's end: meanwhile every
  // process of the job is looked at.
  const std::string controller = net.dir() + "/controller";
  script(controller,
         "#!/bin/sh\necho \"$$ $RIG_REMOTE_KEY $RIG_REMOTE_AGENTS\"\nread line\nexit 0\n");
  int in[2], out[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  const pid_t rig =
      net.start(rig_run("node1,node2", env("RIG_TEST_RIGD"), {controller}), in[0], out[1], -1);
  close(in[0]);
  close(out[1]);
  std::string pending;
  const auto line = rig::child::read_line(out[0], pending, run_timeout_ms);
  REQUIRE(line);
  std::smatch m;
  const std::string seen = *line;
  REQUIRE(std::regex_match(
      seen, m,
      std::regex(R"((\d+) ([0-9a-f]{64}) node1=198\.18\.0\.1:\d+,node2=198\.18\.0\.2:\d+)")));
  const std::string controller_pid = m[1], key = m[2];
  auto holds_key = [&](pid_t pid, const char* what) {
    return read_file("/proc/" + std::to_string(pid) + "/" + what).find(key) != std::string::npos;
  };
  const std::vector<pid_t> on_hosts = net.strays();
  CHECK(on_hosts.size() >= 2);  // each host's rigd, and its session's sshd
  for (const pid_t pid : on_hosts) {
    CHECK_MESSAGE(!holds_key(pid, "cmdline"), "process " << pid << " on a host");
    CHECK_MESSAGE(!holds_key(pid, "environ"), "process " << pid << " on a host");
  }
  for (const pid_t pid : net.in_launcher()) {
    CHECK_MESSAGE(!holds_key(pid, "cmdline"), "process " << pid << " of the launcher");
    if (std::to_string(pid) != controller_pid) {
      CHECK_MESSAGE(!holds_key(pid, "environ"), "process " << pid << " of the launcher");
    }
  }
  close(in[1]);  // the controller ends without starting the job: rig run stops the agents
  const auto status = rig::child::wait_for(rig, run_timeout_ms);
  REQUIRE(status);
  const std::string rest = pending + rig::child::read_all(out[0]);
  close(out[0]);
  CHECK(rest.find("rig run: node1      stopped, as the job did not start\n") != std::string::npos);
  CHECK(rest.find("rig run: node2      stopped, as the job did not start\n") != std::string::npos);
  CHECK(net.no_strays_within(host_end_ms));
}

// rig run --ssh on both hosts with a controller that says "ready" once the job has started and
// then waits for its stdin's end. Owner: the test. Lifetime: its scope, which closes the pipes.
struct ReadyJob {
  explicit ReadyJob(Net& net) {
    const std::string controller = net.dir() + "/controller";
    script(controller, "#!/bin/sh\necho ready\nread line\n");
    int in_fds[2], out_fds[2];
    REQUIRE(pipe2(in_fds, O_CLOEXEC) == 0);
    REQUIRE(pipe2(out_fds, O_CLOEXEC) == 0);
    in = in_fds[1];
    out = out_fds[0];
    rig = net.start(rig_run("node1,node2", env("RIG_TEST_RIGD"), {controller}), in_fds[0],
                    out_fds[1], -1);
    close(in_fds[0]);
    close(out_fds[1]);
    REQUIRE(rig::child::read_line(out, pending, run_timeout_ms) == "ready");
  }
  ~ReadyJob() {
    close(in);
    close(out);
  }
  ReadyJob(const ReadyJob&) = delete;
  ReadyJob& operator=(const ReadyJob&) = delete;
  pid_t rig = -1;
  int in = -1;          // the controller's stdin, through rig run's
  int out = -1;         // rig run's stdout
  std::string pending;  // read from `out` past the "ready" line
};

TEST_CASE("rig run --ssh: a killed rig run leaves no agent on any host") {
  Net net;
  ReadyJob job(net);
  CHECK(!net.strays().empty());
  // SIGKILL: rig run does nothing more, and its end of each ssh's stdin closes with it.
  kill(job.rig, SIGKILL);
  rig::child::wait_exit(job.rig);
  CHECK(net.no_strays_within(host_end_ms));
}

TEST_CASE("rig run --ssh: a host that cannot be reached, logged in to or resolved") {
  Net net;
  struct Case {
    std::string hosts;
    std::string message;  // the line rig run prints; a prefix where it ends with the system's text
    bool prefix;
    int status;
  };
  const std::vector<Case> cases = {
      {"node1,closed",
       "rig run: closed: ssh could not reach it or log in: ssh: connect to host 198.18.0.1 port "
       "2222: Connection refused",
       false, exit_unreachable},
      {"stranger,node1",
       "rig run: stranger: ssh could not reach it or log in: root@198.18.0.2: Permission denied "
       "(publickey).",
       false, exit_unreachable},
      // Nothing starts: the names are resolved before any ssh.
      {"node1,ghost", "rig run: ghost (ssh's HostName ghost.invalid): the name does not resolve: ",
       true, exit_unresolved},
  };
  for (const Case& c : cases) {
    CAPTURE(c.hosts);
    const Ran r = net.run(rig_run(c.hosts, env("RIG_TEST_RIGD"), example()), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == c.status);
    const std::string line = failure_line(r);
    if (c.prefix) {
      CHECK(line.starts_with(c.message));
      CHECK(line.size() > c.message.size());
    } else {
      CHECK(line == c.message);
    }
    CHECK(r.out.empty());  // no controller ran
    CHECK(net.no_strays_within(host_end_ms));
  }
}

TEST_CASE("rig run --ssh: rigd missing or not executable on a host") {
  Net net;
  const std::string missing = net.dir() + "/no-rigd";
  const std::string plain = net.dir() + "/plain";
  std::ofstream(plain) << "not a program\n";
  chmod(plain.c_str(), 0600);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {missing, "rig run: node1: rigd '" + missing + "' is not there: env: '" + missing +
                    "': No such file or directory"},
      {plain, "rig run: node1: rigd '" + plain + "' cannot be run: env: '" + plain +
                  "': Permission denied"},
  };
  for (const auto& [rigd, message] : cases) {
    const Ran r = net.run(rig_run("node1,node2", rigd, example()), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_no_rigd);
    CHECK(failure_line(r) == message);
    CHECK(r.out.empty());
    CHECK(net.no_strays_within(host_end_ms));
  }
}

TEST_CASE(
    "rig run --ssh: a host that reports no address within 10 s ends the start there, and so does "
    "a Ctrl-C meanwhile") {
  Net net;
  // node1 runs the real rigd; node2 a program that prints nothing and ends with its stdin, as a
  // rigd stuck before its listening line would, held by its session.
  const std::string half = net.dir() + "/half";
  script(half, "#!/bin/sh\nif ip -br addr | grep -q ' 198\\.18\\.0\\.1/'; then exec '" +
                   env("RIG_TEST_RIGD") + "' \"$@\"; fi\nexec cat >/dev/null\n");
  {
    const Ran r = net.run(rig_run("node1,node2", half, example()), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_agent_silent);
    CHECK(failure_line(r) == "rig run: node2: no address within 10 s");
    // The bound, and no more than a few seconds past it to stop the other host's agent.
    CHECK(r.seconds >= agent_start_timeout_s);
    CHECK(r.seconds < agent_start_timeout_s + 3);
    CHECK(r.out.empty());
    // node1's rigd, which had started, is gone too.
    CHECK(net.no_strays_within(host_end_ms));
  }
  {
    // A Ctrl-C while rig run waits for node2: the start ends then, not at 10 s, and no controller
    // runs.
    const std::string err_path = net.dir() + "/start.err";
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    const pid_t rig = net.start(rig_run("node1,node2", half, example()), null_fd, out[1], err_fd);
    for (const int fd : {null_fd, err_fd, out[1]}) close(fd);
    // node1's agent runs and node2's session is open (there is no event to wait on but the look):
    // rig run is waiting for node2's address, which never comes.
    auto starting = [&] {
      for (const pid_t pid : net.strays_of("n1")) {
        if (read_file("/proc/" + std::to_string(pid) + "/cmdline").find("--watch-stdin") !=
            std::string::npos) {
          return !net.strays_of("n2").empty();
        }
      }
      return false;
    };
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_timeout_ms);
    bool started = false;
    while (!(started = starting()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(started);
    kill(rig, SIGINT);
    const auto status = rig::child::wait_for(rig, host_end_ms);
    if (!status) kill(rig, SIGKILL);
    const std::string said = rig::child::read_all(out[0]);
    close(out[0]);
    Ran r;
    r.err = read_file(err_path);
    INFO("stdout:\n" << said << "stderr:\n" << r.err);
    REQUIRE_MESSAGE(status, "rig run still running " << host_end_ms << " ms after a Ctrl-C");
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == exit_failure);
    CHECK(failure_line(r) ==
          "rig run: interrupted while the agents started; every agent started is stopped");
    CHECK(said.empty());
    CHECK(net.no_strays_within(host_end_ms));
  }
}

TEST_CASE("rig run --ssh: a Ctrl-C of rig run ends the job's processes on every host") {
  Net net;
  ReadyJob job(net);
  kill(job.rig, SIGINT);
  // The controller takes the SIGINT; the agents' sessions end (their stdin), in order.
  const auto status = rig::child::wait_for(job.rig, host_end_ms);
  REQUIRE_MESSAGE(status, "rig run still running after a Ctrl-C");
  const std::string rest = job.pending + rig::child::read_all(job.out);
  CHECK(rest.find("rig run: node1      stopped, as the job did not start\n") != std::string::npos);
  CHECK(rest.find("rig run: node2      stopped, as the job did not start\n") != std::string::npos);
  CHECK(net.no_strays_within(host_end_ms));
}

TEST_CASE(
    "rig run --ssh: a host whose rigd is killed, or that falls silent, fails the job in 10 s") {
  struct Case {
    std::string what;
    bool blackhole;     // else kill -9 of its rigd
    std::string cause;  // the job's root cause, named by the host as given
  };
  for (const Case& c : {Case{"kill -9 of node2's rigd", false, "node2: closed its connection"},
                        Case{"node2 blackholed (nft drops what it sends and receives)", true,
                             "node2: sent nothing for 10 s"}}) {
    CAPTURE(c.what);
    Net net;
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    // A controller that holds the job until it fails, and says when.
    const pid_t rig =
        net.start(rig_run("node1,node2", env("RIG_TEST_RIGD"), {env("RIG_TEST_LAUNCHED")}), null_fd,
                  out[1], -1);
    close(null_fd);
    close(out[1]);
    std::string pending;
    REQUIRE(rig::child::read_line(out[0], pending, run_timeout_ms) == "started");
    const auto t0 = std::chrono::steady_clock::now();
    if (c.blackhole) {
      net.blackhole("n2", true);
    } else {
      pid_t victim = -1;
      for (const pid_t pid : net.strays_of("n2")) {
        if (read_file("/proc/" + std::to_string(pid) + "/cmdline").find("--watch-stdin") !=
            std::string::npos) {
          victim = pid;
        }
      }
      REQUIRE(victim > 0);
      kill(victim, SIGKILL);
    }
    // The controller's failure, within the liveness bound and a margin.
    const auto failed = rig::child::read_line(out[0], pending, job_fail_bound_ms);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The controller sees the host's end itself, or first hears it from node1, which aborts with
    // it: which comes first is a race, and either names node2.
    const std::string relayed = "node1 aborted: " + c.cause;
    CHECK((failed == "failed: " + c.cause || failed == "failed: " + relayed));
    CHECK(seconds < job_fail_bound_ms / 1000.0);
    // rig run then ends within its own bounds: a blackholed host's ssh is killed 11 s after the
    // controller's end and 2 s of SIGTERM.
    const auto status = rig::child::wait_for(rig, run_timeout_ms);
    if (!status) kill(rig, SIGKILL);
    REQUIRE(status);
    const std::string rest = pending + rig::child::read_all(out[0]);
    close(out[0]);
    INFO("rig run said:\n" << rest);
    CHECK((rest.find("rig run: the job failed: " + c.cause + "\n") != std::string::npos ||
           rest.find("rig run: the job failed: " + relayed + "\n") != std::string::npos));
    if (c.blackhole) net.blackhole("n2", false);  // sshd's session then learns of its end
    CHECK(net.no_strays_within(host_end_ms));
  }
}
