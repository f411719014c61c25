// `rig check` against real rigd agents on loopback: every line it prints for a healthy job, and
// each kind of failed check with its text and exit status.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "remote/support.hpp"
#include "support/job_fixtures.hpp"
#include "support/process.hpp"
#include "support/wire_peer.hpp"

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

// An agent played by hand for one rig check: it answers each round trip to its host, each OPEN
// with `opened_why` (no devices) and the CLOSE; with `answer_submits` false it answers no round
// trip, so the check waits on its first. Runs on a thread of its own until the check's connection
// ends.
struct ScriptedAgent {
  rig::test::FakeAgent agent;
  std::thread t;
  ScriptedAgent(const rig::remote::Key& key, std::string opened_why, bool answer_submits)
      : t([this, key, why = std::move(opened_why), answer_submits] {
          rig::remote::FrameDecoder d;
          const int s = rig::test::accept_job(agent, key, d);
          for (;;) {
            auto f = d.next();
            if (!f) break;
            if (!f->has_value()) {
              pollfd p{s, POLLIN, 0};
              // Alive while it answers nothing: a heartbeat every 100 ms.
              if (::poll(&p, 1, 100) == 0) {
                rig::test::send_message(s, rig::remote::Heartbeat{});
                continue;
              }
              std::uint8_t buf[4096];
              const ssize_t n = ::read(s, buf, sizeof buf);
              if (n <= 0) break;
              d.feed({buf, static_cast<std::size_t>(n)});
              continue;
            }
            auto m = rig::remote::decode(**f);
            if (!m) break;
            if (const auto* sub = std::get_if<rig::remote::Submit>(&*m)) {
              if (answer_submits) {
                rig::test::send_message(s, rig::remote::Reached{sub->device, sub->value});
              }
            } else if (std::holds_alternative<rig::remote::Open>(*m)) {
              rig::test::send_message(s, rig::remote::Opened{why, {}, {}});
            } else if (std::holds_alternative<rig::remote::Close>(*m)) {
              rig::test::send_message(s, rig::remote::Closed{});
              break;
            }
          }
          rig::test::end_and_drain(s);
        }) {}
  ~ScriptedAgent() { t.join(); }
  std::string name() const { return agent.name(); }
};

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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

TEST_CASE("rig check prints an agent's answer that would forge lines escaped, on one line") {
  const auto key_file = rig::test::make_key_file("check-forged");
  Checked c;
  std::string name;
  {
    ScriptedAgent a(rig::test::load_key(key_file), "none\nrig check: all good\x1b[2J", true);
    name = a.name();
    c = rig_check_names(key_file, {name});
  }
  INFO(joined(c.lines));
  CHECK(c.status == 1);
  REQUIRE(c.lines.size() == 5);
  CHECK(std::regex_match(c.lines[1], host_line(name)));
  // Both kinds asked: SIM and CUDA, each answered with the same text.
  for (int i : {2, 3}) {
    CHECK(c.lines[i] == "rig check: " + name + ": none\\nrig check: all good\\x1b[2J");
  }
  CHECK(c.lines[4] == "closed; 2 checks failed");
}

TEST_CASE(
    "rig check interrupted with its output on a file leaves every line it printed, and says "
    "so") {
  const auto key_file = rig::test::make_key_file("check-interrupted");
  rig::remote::test::ScratchDir dir;
  const std::string out = dir.file("check.out");
  // The check's first round trip to the host is never answered: it waits there.
  ScriptedAgent a(rig::test::load_key(key_file), "", false);
  Process p({"/bin/sh", "-c", "exec \"$0\" check --key \"$1\" \"$2\" > \"$3\"",
             rig::test::env("RIG_RIG"), key_file, a.name(), out});
  // Its first line is out once the job has started.
  const auto t0 = std::chrono::steady_clock::now();
  while (file_text(out).find('\n') == std::string::npos && rig::test::seconds_since(t0) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  p.signal(SIGINT);
  REQUIRE(p.wait_for(5000));
  const int status = p.wait();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
  const std::string text = file_text(out);
  INFO(text);
  CHECK(
      std::regex_match(text, std::regex("job started in \\d+\\.\\d ms\nrig check: interrupted\n")));
}

TEST_CASE(
    "rigd's --listen takes only a real HOST:PORT, and at [::] prints a line rig check dials") {
  const auto key = rig::test::make_key_file("check-listen");
  struct Case {
    std::string listen;
    std::string why;
  };
  for (const Case& c :
       {Case{":0", "no address"}, Case{":+0", "no address"}, Case{": 0", "no address"},
        Case{"127.0.0.1:", "port '' is not a number from 0 to 65535"},
        Case{"127.0.0.1:+0", "port '+0' is not a number from 0 to 65535"},
        Case{"127.0.0.1: 0", "port ' 0' is not a number from 0 to 65535"}}) {
    CAPTURE(c.listen);
    Process rigd({rig::test::env("RIG_RIGD"), "--key", key, "--listen", c.listen});
    CHECK(rigd.err_line() == "rigd: --listen takes HOST:PORT, not '" + c.listen + "': " + c.why);
    REQUIRE(rigd.wait_for(5000));
    const int status = rigd.wait();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
  }
  // Every address, IPv6 and IPv4: the line names it in brackets, and the port it prints is the one
  // a check then reaches at the IPv6 loopback.
  Process rigd({rig::test::env("RIG_RIGD"), "--key", key, "--listen", "[::]:0"});
  const auto line = rigd.line(5000);
  if (!line) {
    MESSAGE("no IPv6 here: " << rigd.err_line(1000).value_or(""));
    return;
  }
  REQUIRE(std::regex_match(*line, std::regex(R"(listening \[::\]:\d+)")));
  const auto at = rig::remote::parse_listening_line(*line);
  REQUIRE(at.ok());
  CHECK(at->host == "::");
  const Checked c = rig_check_names(key, {rig::remote::address_text("::1", at->port)});
  INFO(joined(c.lines));
  CHECK(c.status == 0);
  CHECK(c.lines.back() == "closed; every agent answered and every byte came back");
}
