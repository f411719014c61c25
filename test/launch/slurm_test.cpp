// rig run --slurm in a real Slurm (Debian's slurm-wlm and munge): three nodes in network and UTS
// namespaces (net.hpp), the remote example through salloc and through sbatch, and the failures to
// start with their exact messages, exit statuses and nothing left on any node.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "child/child.hpp"
#include "net.hpp"

using namespace rig::test;

namespace {

constexpr int node_end_ms = 5'000;      // a node's rigd ends with its srun's stdin
constexpr int scancel_end_ms = 12'000;  // the issue's bound on a scancel's end on every node

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

TEST_CASE("rig run --slurm: rigd missing on the nodes, and srun's own refusal") {
  Net net(Net::Engine::slurm);
  {
    const std::string missing = net.dir() + "/no-rigd";
    const Ran r = net.run(in_salloc(3, rig_slurm(missing)), run_timeout_ms);
    INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == exit_no_rigd);
    // srun runs env by its path; env's words come back through srun's stderr.
    CHECK(last_rig_line(r.err) == "rig run: n1: rigd '" + missing +
                                      "' is not there: /usr/bin/env: '" + missing +
                                      "': No such file or directory");
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

TEST_CASE("rig run --slurm: a node that reports no address within 10 s ends the start there") {
  Net net(Net::Engine::slurm);
  // n1 and n2 run the real rigd; n3 a program that prints nothing and ends with its stdin.
  const std::string half = net.dir() + "/half";
  {
    std::ofstream(half) << "#!/bin/sh\nif [ \"$SLURMD_NODENAME\" != n3 ]; then exec '"
                        << env("RIG_TEST_RIGD") << "' \"$@\"; fi\nexec cat >/dev/null\n";
  }
  chmod(half.c_str(), 0755);
  const Ran r = net.run(in_salloc(3, rig_slurm(half)), run_timeout_ms);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == exit_agent_silent);
  CHECK(last_rig_line(r.err) == "rig run: n3: no address within 10 s");
  CHECK(r.seconds >= 10);
  CHECK(r.seconds < 10 + 5);  // the bound, salloc's start and the stop of n1's and n2's agents
  CHECK(r.out.empty());
  CHECK(net.no_strays_within(node_end_ms));
}
