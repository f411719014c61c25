// `rig check` against real rigd agents on loopback: every line it prints for a healthy job, and
// each kind of failed check with its text and exit status.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "remote/io/address.hpp"
#include "support/job_fixtures.hpp"
#include "support/process.hpp"

using rig::test::Process;
using rig::test::Rigd;

namespace {

struct Checked {
  int status = -1;  // rig check's exit status
  std::vector<std::string> lines;
};

// Runs `rig check` on the agents `names` with `key_file` and collects its stdout and exit status.
Checked rig_check_names(const std::string& key_file, const std::vector<std::string>& names) {
  std::vector<std::string> argv = {rig::test::env("RIG_RIG"), "check", "--key", key_file};
  argv.insert(argv.end(), names.begin(), names.end());
  Process p(argv);
  Checked c;
  // A healthy check of two agents takes well under a second; a failing one under the job's 10 s.
  while (auto l = p.line(30'000)) c.lines.push_back(*l);
  const int status = p.wait();
  REQUIRE(WIFEXITED(status));
  c.status = WEXITSTATUS(status);
  return c;
}

Checked rig_check(const std::string& key_file, const std::vector<Rigd*>& agents) {
  std::vector<std::string> names;
  for (Rigd* a : agents) names.push_back(a->name());
  return rig_check_names(key_file, names);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// The dots and brackets of a machine's name ("127.0.0.1:4000") as a regular expression.
std::string quoted(const std::string& s) {
  return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

// The line of a host: its name, arch, memory and round-trip times.
std::regex host_line(const std::string& machine) {
  return std::regex("CPU@" + quoted(machine) +
                    R"( +arch \S+ +memory +\d+ MiB  round trip median \d+\.\d us, max \d+\.\d us)");
}

// The line of a SIM device: rigd's SIM devices have the default 1 GiB budget.
std::regex sim_line(int index, const std::string& machine) {
  return std::regex("SIM:" + std::to_string(index) + "@" + quoted(machine) +
                    R"( +arch sim +budget +1024 MiB  copy of 1048581 bytes there and back )"
                    R"(median \d+\.\d\d ms, max \d+\.\d\d ms, every byte checked)");
}

}  // namespace

TEST_CASE("rig check prints each host and each device it copied to and back, and exits 0") {
  const auto key = rig::test::make_key_file("check-ok");
  Rigd a(key), b(key);
  const Checked c = rig_check(key, {&a, &b});
  INFO(joined(c.lines));
  CHECK(c.status == 0);
  // One line for the start, then per machine its host and its two SIM devices (no CUDA line: the
  // agents serve none and say so, which is not a failure), then the close.
  REQUIRE(c.lines.size() == 8);
  CHECK(std::regex_match(c.lines[0], std::regex(R"(job started in \d+\.\d ms)")));
  for (std::size_t m = 0; m < 2; ++m) {
    const std::string machine = (m == 0 ? a : b).name();
    CAPTURE(machine);
    CHECK(std::regex_match(c.lines[1 + 3 * m], host_line(machine)));
    CHECK(std::regex_match(c.lines[2 + 3 * m], sim_line(0, machine)));
    CHECK(std::regex_match(c.lines[3 + 3 * m], sim_line(1, machine)));
  }
  CHECK(c.lines[7] == "closed; every agent answered and every byte came back");
  // The check closed the job in order: each agent logs its end as closed, not failed.
  for (Rigd* r : {&a, &b}) {
    const auto end = r->job_end(1);
    REQUIRE(end.has_value());
    CHECK(end->ends_with("job 1: closed"));
  }
}

TEST_CASE("rig check names an agent whose devices do not open, checks the rest, and exits 1") {
  const auto key = rig::test::make_key_file("check-none");
  // This agent serves SIM, but its machine has no SIM devices: its opener answers an Error.
  Rigd a(key, {}, {"RIG_SIM_DEVICES=0"});
  Rigd b(key);
  const Checked c = rig_check(key, {&a, &b});
  INFO(joined(c.lines));
  CHECK(c.status == 1);
  REQUIRE(c.lines.size() == 7);
  CHECK(std::regex_match(c.lines[1], host_line(a.name())));
  CHECK(c.lines[2] == "rig check: " + a.name() + ": this machine has no SIM devices");
  CHECK(std::regex_match(c.lines[3], host_line(b.name())));
  CHECK(std::regex_match(c.lines[4], sim_line(0, b.name())));
  CHECK(std::regex_match(c.lines[5], sim_line(1, b.name())));
  CHECK(c.lines[6] == "closed; 1 check failed");
}

TEST_CASE("rig check reports a job that fails while it opens devices, and exits 1") {
  const auto key = rig::test::make_key_file("check-fail");
  // The opener raises (a malformed count), which fails the job on the agent with that text. rigd
  // refuses such a value at its start (below); this agent serves SIM as rigd does but checks
  // nothing at its start, so the value reaches the opener.
  Process agent({rig::test::env("RIG_TEST_AGENT"), key, "--sim"}, {"RIG_SIM_DEVICES=lots"});
  const auto listening = agent.line();
  REQUIRE(listening.has_value());
  const auto at = rig::remote::parse_listening_line(*listening);
  REQUIRE(at.ok());
  const std::string name = rig::remote::address_text(at->host, at->port);
  const Checked c = rig_check_names(key, {name});
  INFO(joined(c.lines));
  CHECK(c.status == 1);
  REQUIRE(c.lines.size() == 3);
  CHECK(std::regex_match(c.lines[1], host_line(name)));
  CHECK(c.lines[2] == "rig check: the job failed: " + name +
                          " aborted: rig: RIG_SIM_DEVICES='lots' is not a count from 0 to 64");
  CHECK(agent.line(5000) == "error: rig: RIG_SIM_DEVICES='lots' is not a count from 0 to 64");
}

TEST_CASE("rigd refuses a bad value of any RIG_* tunable at its start: exit 2, naming both") {
  const auto key = rig::test::make_key_file("check-tunables");
  struct Case {
    std::string setting;
    std::string error;
  };
  for (const Case& c : {
           Case{"RIG_LOOP_SPIN_US=abc",
                "rig: RIG_LOOP_SPIN_US='abc' is not a time in microseconds from 0 to 1000000"},
           Case{"RIG_AGENT_POLL_US=-1",
                "rig: RIG_AGENT_POLL_US='-1' is not a time in microseconds from 0 to 1000000"},
           Case{"RIG_CUDA_POLL_NS=1000000001",
                "rig: RIG_CUDA_POLL_NS='1000000001' is not a time "
                "in nanoseconds from 0 to 1000000000"},
           Case{"RIG_SIM_DEVICES=lots", "rig: RIG_SIM_DEVICES='lots' is not a count from 0 to 64"},
           Case{"RIG_SIM_LATENCY_US=9-1",
                "rig: RIG_SIM_LATENCY_US='9-1' is not a time in "
                "microseconds from 0 to 10000000, or MIN-MAX of two"},
           Case{"RIG_SIM_SEED=0x10",
                "rig: RIG_SIM_SEED='0x10' is not a seed from 0 to "
                "18446744073709551615"},
       }) {
    CAPTURE(c.setting);
    // The daemon, and the --once agent a launcher starts: neither binds its port.
    for (bool once : {false, true}) {
      std::vector<std::string> argv = {rig::test::env("RIG_RIGD"), "--key", key, "--listen",
                                       "127.0.0.1:0"};
      if (once) argv.push_back("--once");
      Process rigd(argv, {c.setting});
      CHECK(rigd.err_line() == "rigd: " + c.error);
      CHECK(rigd.line(5000) == std::nullopt);  // no listening line: it stopped before it bound
      REQUIRE(rigd.wait_for(5000));
      const int status = rigd.wait();
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 2);
    }
  }
}

TEST_CASE("rig check reports a job that does not start, and exits 1") {
  Rigd a(rig::test::make_key_file("check-theirs"));
  const Checked c = rig_check(rig::test::make_key_file("check-mine"), {&a});
  CHECK(c.status == 1);
  CHECK(c.lines == std::vector<std::string>{"rig check: the job did not start: " + a.name() +
                                            ": holds another key"});
}
