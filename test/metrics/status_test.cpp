// rig status against real rigd: one idle, one serving a job, then one killed; its lines, its
// --json, its exit statuses.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "http_get.hpp"
#include "remote/io/address.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"
#include "support/process.hpp"
#include "support/rigd_fixtures.hpp"

using rig::test::load_key;
using rig::test::make_key_file;
using rig::test::RigdProcess;

namespace {

// A rigd with --metrics; the address its endpoint listens at.
struct StatusRigd : RigdProcess {
  std::string metrics;
  explicit StatusRigd(const std::string& key_file)
      : RigdProcess({"--key", key_file, "--metrics", "127.0.0.1:0"}) {
    listening();
    const auto line = rig::child::read_line(out, out_buf, 10'000);
    REQUIRE(line.has_value());
    REQUIRE(line->starts_with("metrics "));
    metrics = line->substr(8);
    // Until its device probe has ended, an agent's line has no devices to show.
    auto at = rig::remote::parse_address(metrics);
    REQUIRE(at.ok());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto r = rig::cli::http_get(at->host, at->port, "/status", 10'000);
      REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
      if (!nlohmann::json::parse(r->body)["devices"].is_null()) break;
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until, "no devices in /status in 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

// The devices this machine has of the default kinds (CPU, SIM), as rig status lists them.
std::string devices_here() {
  std::string names;
  for (const rig::Kind kind : {rig::Kind::cpu, rig::Kind::sim}) {
    for (const rig::Device& d : rig::open(kind)) names += (names.empty() ? "" : ",") + d.name();
  }
  return names;
}

// rig status ARGS: its exit status and stdout.
std::pair<int, std::string> rig_status(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {rig::test::env("RIG_RIG"), "status"};
  argv.insert(argv.end(), args.begin(), args.end());
  rig::test::Process p(argv);
  std::string out;
  while (auto l = p.line(20'000)) out += *l + "\n";
  REQUIRE(p.wait_for(20'000));
  const int status = p.wait();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace

TEST_SUITE("metrics") {
  TEST_CASE("rig status: one idle agent, one serving; then one killed is a line and exit 1") {
    const std::string key_file = make_key_file("metrics-status");
    const auto key = load_key(key_file);
    StatusRigd idle(key_file);
    StatusRigd busy(key_file);
    REQUIRE(busy.err_until("job 1: waiting for a controller").has_value());
    const int peer = rig::test::prove_as_controller(busy.port, key);
    REQUIRE(busy.err_until("job 1: started by the controller at ").has_value());

    auto [status, out] = rig_status({idle.metrics, busy.metrics});
    INFO(out);
    CHECK(status == 0);
    const std::string devices = devices_here();
    const std::string idle_line = idle.metrics + "  idle  kinds CPU,SIM  arch [^ ]+  devices " +
                                  devices + "  jobs 0 \\(0 closed, 0 failed\\)  last: none\n";
    const std::string busy_line = busy.metrics +
                                  "  serving job 1 for 127\\.0\\.0\\.1:[0-9]+ since "
                                  "20[0-9-]+T[0-9:]+Z  memory 0 B  kinds CPU,SIM  arch [^ ]+  "
                                  "devices " +
                                  devices +
                                  " \\(0 in use\\)  jobs 1 \\(0 closed, 0 failed\\)  last: "
                                  "none\n";
    CHECK(std::regex_match(out, std::regex(idle_line + busy_line)));

    auto [json_status, json_out] = rig_status({"--json", busy.metrics});
    CHECK(json_status == 0);
    const auto j = nlohmann::json::parse(json_out);
    REQUIRE(j.is_array());
    REQUIRE(j.size() == 1);
    CHECK(j[0]["agent"] == busy.metrics);
    CHECK(j[0]["status"]["state"] == "serving");
    CHECK(j[0]["status"]["job"]["number"] == 1);

    // The job fails when its controller goes; the agent says so.
    ::close(peer);
    REQUIRE(busy.err_until("job 1: failed controller: closed its connection").has_value());
    std::tie(status, out) = rig_status({busy.metrics});
    CHECK(status == 0);
    CHECK(
        out.ends_with("  last: job 1 failed (connection_closed): controller: closed its "
                      "connection\n"));

    // One killed: its line says it cannot be reached, the other's is as before, and the exit is 1.
    kill(busy.pid, SIGKILL);
    REQUIRE(busy.wait_for(10'000).has_value());
    std::tie(status, out) = rig_status({idle.metrics, busy.metrics});
    CHECK(status == 1);
    CHECK(std::regex_match(out, std::regex(idle_line + busy.metrics +
                                           "  unreachable: connect: Connection refused\n")));
    std::tie(json_status, json_out) = rig_status({"--json", busy.metrics});
    CHECK(json_status == 1);
    CHECK(nlohmann::json::parse(json_out)[0]["error"] ==
          "unreachable: connect: Connection refused");
  }

  TEST_CASE("rig status: usage errors exit 2 and name the argument") {
    auto [status, out] = rig_status({});
    CHECK(status == 2);
    std::tie(status, out) = rig_status({"nohostport"});
    CHECK(status == 2);
    std::tie(status, out) = rig_status({"--bogus", "127.0.0.1:1"});
    CHECK(status == 2);
  }
}
