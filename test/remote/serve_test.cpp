// serve's own rules with real processes on loopback: openers and other long calls run off its
// loop (heartbeats, handshakes and aborts go on meanwhile), its signal mask, what it raises, when
// it stops listening, and the cause of a join that times out. Liveness times are scaled down by 10
// (1 s of silence instead of 10 s), as in fault_test.cpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"
#include "support/wire_peer.hpp"

using namespace std::chrono_literals;
using rig::test::env;
using rig::test::load_key;
using rig::test::make_key_file;
using rig::test::Process;
using rig::test::Rigd;
using rig::test::sanitizer_slowdown;
using rig::test::seconds_since;

namespace {

constexpr int divisor = rig::test::scaled_divisor;
using rig::test::ScaledTiming;

// rig-test-agent (agent_tool.cpp) at 127.0.0.1 with `options`, its liveness times scaled down.
struct TestAgent {
  Process p;
  int port = 0;
  explicit TestAgent(const std::string& key_file, const std::vector<std::string>& options)
      : p(argv(key_file, options)) {
    const auto line = p.line();
    REQUIRE(line.has_value());
    const auto at = rig::remote::parse_listening_line(*line);
    REQUIRE_MESSAGE(at.ok(), *line);
    port = at->port;
  }
  static std::vector<std::string> argv(const std::string& key_file,
                                       const std::vector<std::string>& options) {
    std::vector<std::string> a = {env("RIG_TEST_AGENT"), key_file, "--timing-divisor",
                                  std::to_string(divisor)};
    a.insert(a.end(), options.begin(), options.end());
    return a;
  }
  std::string name() const { return rig::remote::address_text("127.0.0.1", port); }
  rig::remote::Address address() const { return {"127.0.0.1", port}; }
};

// The process's next line of output, within 5 s.
std::string line_of(Process& p) {
  return p.line(5000).value_or("(no line within 5 s)");
}

// A controller's thread in devices(host, "SLOW") while the test acts on the agent, from the moment
// the agent's slow opener has begun (its "opening" line). Owner: the test's stack frame; the
// thread is joined by join() or at the end of the scope.
struct SlowOpen {
  std::optional<rig::Result<std::vector<rig::Device>>> opened;
  std::jthread thread;
  SlowOpen(const rig::Device& host, Process& agent)
      : thread([this, host] { opened.emplace(rig::remote::devices(host, "SLOW")); }) {
    CHECK(line_of(agent) == "opening");
  }
  void join() { thread.join(); }
};

bool refuses_connections(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(s);
  return rc != 0 && err == ECONNREFUSED;
}

}  // namespace

TEST_CASE("an opener three times the silence rule: the job goes on, and the agent answers others") {
  ScaledTiming scaled;
  const std::string key_file = make_key_file("slow-opener");
  TestAgent a(key_file, {"--slow-opener", "3000"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const rig::Device host = job->hosts()[0];
  std::optional<rig::Result<std::vector<rig::Device>>> opened;
  const auto t0 = std::chrono::steady_clock::now();
  std::jthread opener([&] { opened.emplace(rig::remote::devices(host, "SLOW")); });
  CHECK(line_of(a.p) == "opening");
  // Meanwhile the agent answers a second controller's handshake at once.
  const auto second_at = std::chrono::steady_clock::now();
  Process second({env("RIG_TEST_CONTROLLER"), key_file, a.name()});
  CHECK(line_of(second) == "error: " + a.name() + ": serves another job");
  CHECK(seconds_since(second_at) < 1.0 * sanitizer_slowdown);
  opener.join();
  const double took = seconds_since(t0);
  // Three times the 1 s silence rule went by: the agent's heartbeats kept the job alive.
  CHECK(job->failed() == std::nullopt);
  CHECK(took >= 3.0);
  REQUIRE(opened.has_value());
  CHECK_MESSAGE(opened->ok(), (opened->ok() ? "" : opened->error()));
  if (opened->ok() && !(*opened)->empty()) {
    // The devices work, and a second devices() call gives the same ones at once.
    const rig::Device d = (*opened)->front();
    d.wait(rig::submit(d, std::span<const rig::Part>{}));
    auto again = rig::remote::devices(host, "SLOW");
    CHECK((again.ok() && again->front() == d));
  } else {
    FAIL_CHECK("no devices");
  }
  job->close();
  CHECK(line_of(a.p) == "closed");
}

TEST_CASE("a job that fails while an opener runs ends on the agent within the bound") {
  ScaledTiming scaled;
  const std::string key_file = make_key_file("fail-in-opener");
  TestAgent a(key_file, {"--slow-opener", "30000"});  // far longer than the test
  Rigd b(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  auto job = rig::remote::connect(load_key(key_file), {a.address(), b.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  SlowOpen opener(job->hosts()[0], a.p);
  auto& opened = opener.opened;
  const auto t0 = std::chrono::steady_clock::now();
  kill(b.job_pid(1), SIGKILL);
  const std::string end = line_of(a.p);
  const double ended = seconds_since(t0);
  // The controller's abort, or the agent's own loss of its connection to b.
  const bool either = end == "error: controller aborted: " + b.name() + ": closed its connection" ||
                      end == "error: " + b.name() + ": closed its connection";
  CHECK_MESSAGE(either, end);
  // The abort arrives and the connections drain at once: the opener is not waited for.
  CHECK(ended < 1.0 * sanitizer_slowdown);
  opener.join();
  REQUIRE(opened.has_value());
  CHECK_FALSE(opened->ok());
  // The process exits while the opener still sleeps on its thread, with serve's status.
  CHECK(a.p.wait_for(5000));
  CHECK(WIFEXITED(a.p.wait()));
  CHECK(WEXITSTATUS(a.p.wait()) == 1);
  job->close();
}

TEST_CASE("Ctrl-C while an opener runs: serve raises Break within the bound") {
  ScaledTiming scaled;
  const std::string key_file = make_key_file("break-in-opener");
  TestAgent a(key_file, {"--slow-opener", "30000"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  SlowOpen opener(job->hosts()[0], a.p);
  auto& opened = opener.opened;
  const auto t0 = std::chrono::steady_clock::now();
  a.p.signal(SIGINT);
  CHECK(line_of(a.p) == "interrupted");
  CHECK(seconds_since(t0) < 1.0 * sanitizer_slowdown);
  opener.join();
  REQUIRE(opened.has_value());
  REQUIRE_FALSE(opened->ok());
  CHECK(opened->error() == a.name() + " aborted: interrupted");
  job->close();
}

TEST_CASE("an opener that throws something not derived from std::exception fails the job, named") {
  const std::string key_file = make_key_file("throw-int");
  TestAgent a(key_file, {"--throwing-opener"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const std::string why =
      "the opener of kind THROW threw an exception not derived from "
      "std::exception";
  auto opened = rig::remote::devices(job->hosts()[0], "THROW");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error() == a.name() + " aborted: " + why);
  CHECK(line_of(a.p) == "error: " + why);
  CHECK(a.p.wait_for(5000));
  CHECK(WIFEXITED(a.p.wait()));
  job->close();
}

TEST_CASE("serve's own steps block signals, its waits and the openers do not") {
  const std::string key_file = make_key_file("signals");
  TestAgent a(key_file, {"--signals"});
  a.p.signal(SIGUSR1);  // while serve waits for a controller: its handler runs in that wait
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  // serve's log line runs in one of its steps (the controller's proof).
  CHECK(line_of(a.p) == "step: SIGUSR1 blocked");
  auto opened = rig::remote::devices(job->hosts()[0], "SIGNALS");
  REQUIRE_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error()));
  CHECK(line_of(a.p) == "opener: SIGUSR1 open, handled 1");
  job->close();
  CHECK(line_of(a.p) == "closed");
}

TEST_CASE("an exception that ends one of serve's steps is raised again once it stops listening") {
  const std::string key_file = make_key_file("step-throws");
  TestAgent a(key_file, {"--throwing-log"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_FALSE(job.ok());
  CHECK(job.error() == a.name() + " aborted: the log broke");
  CHECK(line_of(a.p) == "raised: the log broke");
  CHECK(line_of(a.p) == "not listening");
}

TEST_CASE("serve returns the Error of a report descriptor that is not open, and stops listening") {
  auto agent = rig::remote::listen(load_key(make_key_file("bad-report")), "127.0.0.1", 0);
  REQUIRE(agent.ok());
  const int port = agent->port();
  setenv("RIG_REMOTE_REPORT", "987", 1);
  auto r = rig::remote::serve(*agent, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error() == "RIG_REMOTE_REPORT=987 names no open descriptor");
  CHECK(std::getenv("RIG_REMOTE_REPORT") == nullptr);
  CHECK(refuses_connections(port));
}

TEST_CASE("a join that times out names both machines that did not connect") {
  ScaledTiming scaled;
  const std::string key_file = make_key_file("join-timeout");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  const auto hung = rig::test::hang_a_join(load_key(key_file), a.address());
  CHECK(hung.error == a.name() + " aborted: " + a.name() + " and " + hung.fake_name +
                          " did not connect to each other within 1 s");
  CHECK(hung.abort_to_fake == hung.error);
  CHECK(hung.took_s >= 1.0);
  CHECK(hung.took_s < 1.0 + 0.5 * sanitizer_slowdown);
}

TEST_CASE("a close while an opener runs applies after it, in order") {
  ScaledTiming scaled;
  const std::string key_file = make_key_file("close-in-opener");
  TestAgent a(key_file, {"--slow-opener", "2000"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  SlowOpen opener(job->hosts()[0], a.p);
  auto& opened = opener.opened;
  const auto t0 = std::chrono::steady_clock::now();
  job->close();
  const double took = seconds_since(t0);
  opener.join();
  // The agent answered the OPEN first, then closed what it opened, then the job.
  CHECK(took >= 1.5);
  CHECK(took < 2.0 + 0.5 * sanitizer_slowdown);
  CHECK_MESSAGE(opened->ok(), (opened->ok() ? "" : opened->error()));
  CHECK(job->failed() == std::nullopt);
  CHECK(line_of(a.p) == "closed");
}

TEST_CASE("an agent's device lost other than by a close fails the job within a second, named") {
  const std::string key_file = make_key_file("agent-device-lost");
  TestAgent a(key_file, {"--lose-after-ms", "300"});
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const auto opened = rig::remote::devices(job->hosts()[0], "LOSE");
  REQUIRE_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error()));
  REQUIRE(line_of(a.p) == "lost");
  const auto t0 = std::chrono::steady_clock::now();
  const auto cause = rig::test::wait_for_failure(*job, t0, 5);
  const double detected = seconds_since(t0);
  REQUIRE(cause.has_value());
  CHECK(*cause == a.name() + " aborted: SIM:0: lost for the test");
  CHECK(detected < 1.0 * sanitizer_slowdown);
  CHECK(line_of(a.p) == "error: SIM:0: lost for the test");
  job->close();
}
