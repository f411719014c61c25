// The texts that tell the operator what went wrong at a job's start and when a process of it
// stops, with real rigd processes and hand-made peers on loopback: each is worded for what
// happened (issue 13, item 8), so that it sends the operator the right way. Liveness times are
// scaled down by 10 (docs/failure.md gives the real ones).
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "remote/trust/handshake.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"
#include "rig/remote.hpp"
#include "support/job_fixtures.hpp"
#include "support/rig_run.hpp"
#include "support/wire_peer.hpp"

using rig::test::FakeAgent;
using rig::test::Rigd;
using rig::test::ScaledTiming;

namespace {

const std::vector<std::string> scaled_rigd = {"--test-timing-divisor",
                                              std::to_string(rig::test::scaled_divisor)};

// The end of rigd's job `n` as its log gives it, without the "rigd[PID]: job N: " before it.
std::string job_end_text(Rigd& a, int n) {
  const auto line = a.job_end(n);
  REQUIRE_MESSAGE(line.has_value(), "rigd logged no end of job " << n);
  const std::string tag = "job " + std::to_string(n) + ": ";
  return line->substr(line->find(tag) + tag.size());
}

}  // namespace

TEST_CASE(
    "an agent whose process takes no connection: it sent no greeting, the key is not blamed") {
  ScaledTiming scaled;
  const std::string key_file = rig::test::make_key_file("no-greeting");
  Rigd a(key_file, scaled_rigd);
  // The job's process is stopped: the kernel completes the connection in the listening socket's
  // backlog, and nothing ever greets it.
  const pid_t child = a.job_pid(1);
  REQUIRE(kill(child, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  const double took_s = rig::test::seconds_since(t0);
  kill(child, SIGCONT);
  REQUIRE_FALSE(job.ok());
  CHECK(job.error() == a.name() + ": sent no greeting within 1 s");
  CHECK(took_s >= 1.0);
  CHECK(took_s < 2.0 * rig::test::sanitizer_slowdown);  // 1 s and a tick, on a loaded machine
  // Resumed, the agent serves the next controller.
  auto next = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(next.ok(), (next.ok() ? "" : next.error()));
  next->close();
}

TEST_CASE("one agent listed under two spellings: the job fails as listed twice, naming both") {
  const std::string key_file = rig::test::make_key_file("listed-twice");
  Rigd a(key_file, scaled_rigd);
  auto job = rig::remote::connect(rig::test::load_key(key_file),
                                  {{"127.0.0.1", a.port}, {"localhost", a.port}});
  REQUIRE_FALSE(job.ok());
  const std::string cause = rig::remote::address_text("localhost", a.port) +
                            ": listed twice: the same agent as " + a.name();
  CHECK(job.error() == cause);
  // The agent's job heard why, in the controller's abort.
  CHECK(job_end_text(a, 1) == "failed controller aborted: " + cause);
}

namespace {

// Reads frames on `s` until an ABORT, sending a heartbeat every 20 ms meanwhile (so this end never
// falls silent): its reason, or nothing if the connection ended first.
std::optional<std::string> heartbeat_until_abort(int s, rig::remote::FrameDecoder& d) {
  for (;;) {
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, 20) == 0) {
      rig::test::send_message(s, rig::remote::Heartbeat{});
      continue;
    }
    std::uint8_t buf[4096];
    const ssize_t n = ::read(s, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    d.feed({buf, static_cast<std::size_t>(n)});
    while (auto f = d.next()) {
      if (!f->has_value()) break;
      auto m = rig::remote::decode(**f);
      if (!m) return std::nullopt;
      if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) return abort->reason;
    }
  }
}

}  // namespace

TEST_CASE("an agent that never answers its JOIN (lost on the way): the controller says just that") {
  ScaledTiming scaled;
  const auto key = rig::test::load_key(rig::test::make_key_file("join-lost"));
  FakeAgent agent;
  std::optional<std::string> abort;
  std::thread fake([&] {
    const int s = agent.accept_and_prove(key);
    rig::remote::FrameDecoder d;
    // The JOIN is taken and dropped, as a link that loses it would: this agent never answers.
    REQUIRE(rig::test::read_until<rig::remote::Join>(s, d));
    abort = heartbeat_until_abort(s, d);
    rig::test::end_and_drain(s);
  });
  auto job = rig::remote::connect(key, {{"127.0.0.1", agent.port}});
  fake.join();
  REQUIRE_FALSE(job.ok());
  // A one-agent job has no other agents to connect to: the old text blamed exactly that.
  CHECK(job.error() == agent.name() + ": did not answer the JOIN within 1.1 s");
  CHECK(abort == job.error());
}

TEST_CASE("a controller that comes as the agent's job ends is told so, not cut mid-handshake") {
  const std::string key_file = rig::test::make_key_file("came-late");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file, scaled_rigd);
  auto job = rig::remote::connect(key, {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  // The next controller, by hand: job 1's process accepts it and greets it, and it holds its
  // proof back, so that it is still proving the key when job 1 ends.
  const int s = rig::test::connect_loopback(a.port);
  auto next = rig::remote::Handshake::dialer(
      key, {rig::remote::Role::controller, "controller", rig::remote::new_job_id(), a.name(),
            rig::remote::new_instance_id()});
  auto read_some = [&] {
    pollfd p{s, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    std::uint8_t buf[4096];
    const ssize_t n = ::read(s, buf, sizeof buf);
    if (n <= 0) {
      next.end_of_input();
      return;
    }
    next.feed({buf, static_cast<std::size_t>(n)});
  };
  while (next.state() == rig::remote::Handshake::State::awaiting_greeting) read_some();
  REQUIRE(next.state() == rig::remote::Handshake::State::awaiting_reply);
  job->close();
  while (!next.done()) read_some();
  CHECK(next.why() == "was ending a job and turned this connection away");
  ::close(s);
  CHECK(job_end_text(a, 1) == "closed");
  // The agent's next job serves the next controller.
  auto again = rig::remote::connect(key, {a.address()});
  REQUIRE_MESSAGE(again.ok(), (again.ok() ? "" : again.error()));
  again->close();
}

TEST_CASE(
    "an agent that stops for longer than the silence rule reads the abort that came meanwhile") {
  ScaledTiming scaled;
  const std::string key_file = rig::test::make_key_file("self-stopped");
  Rigd a(key_file, scaled_rigd);
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const pid_t child = a.job_pid(1);
  REQUIRE(kill(child, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  // The controller finds the agent silent after 1 s and aborts; the agent runs again at 1.5 s,
  // with that abort unread (the controller drains for 1 s more, so the connection is still there).
  const auto cause = rig::test::wait_for_failure(*job, t0, 5);
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(1500));
  kill(child, SIGCONT);
  const std::string silent = a.name() + ": sent nothing for 1 s";
  CHECK(cause == silent);
  // Not "failed controller: sent nothing for 1 s": the agent's clock jumped, so it read first.
  CHECK(job_end_text(a, 1) == "failed controller aborted: " + silent);
  job->close();
}

TEST_CASE(
    "an agent slow to connect holds the start up: the controller names it, not the healthy one") {
  // Times divided by 5 here: each step of the start has 2 s.
  constexpr int five = 5;
  rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(five));
  struct Restore {
    ~Restore() { rig::remote::set_job_timing(rig::remote::Timing{}); }
  } restore;
  const std::string key_file = rig::test::make_key_file("slow-other");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(five)});
  // B: a listening socket whose accept queue a first connection fills (a backlog of 0 holds one).
  // The controller's SYN to it is dropped and sent again after TCP's first retransmission time
  // (1 s), by when the test has taken the first connection: so the controller's connection to B
  // forms 1 s late, and nothing ever greets it. The controller gives it 2 s from then; A, proven
  // at once, is still waiting for its JOIN.
  FakeAgent b;
  REQUIRE(::listen(b.fd, 0) == 0);
  const int filler = rig::test::connect_loopback(b.port);
  int taken = -1;
  std::thread freer([&] {
    // A is proven only after the controller dialed both agents, B's SYN dropped already.
    REQUIRE(a.p->err_until("started by the controller", 5000).has_value());
    taken = ::accept(b.fd, nullptr, nullptr);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto job =
      rig::remote::connect(rig::test::load_key(key_file), {a.address(), {"127.0.0.1", b.port}});
  const double took_s = rig::test::seconds_since(t0);
  freer.join();
  REQUIRE_FALSE(job.ok());
  MESSAGE("connect failed after " << took_s << " s: " << job.error());
  // The root cause is B's (which of its two texts depends on when its SYN got in); A heard it.
  const bool names_b =
      rig::test::names_address(job.error(), b.name(), ": sent no greeting within 2 s") ||
      rig::test::names_address(job.error(), b.name(), ": cannot connect: no answer within 2 s");
  CHECK_MESSAGE(names_b, job.error());
  CHECK(job_end_text(a, 1) == "failed controller aborted: " + job.error());
  ::close(filler);
  if (taken >= 0) ::close(taken);
}

TEST_CASE(
    "rig run: a controller stopped, then killed: the root cause is its silence, which came first") {
  const std::string divisor = std::to_string(rig::test::scaled_divisor);
  rig::test::RigRun run(
      "stopped-controller", 1, {"--test-timing-divisor", divisor},
      {rig::test::env("RIG_TEST_LAUNCHED"), "--timing-divisor", divisor, "--hold-ms", "60000"});
  REQUIRE(run.p->line() == "started");
  // The controller: rig run's child that is not an agent.
  const auto agents = run.agent_pids();
  REQUIRE(agents.size() == 1);
  pid_t controller = -1;
  {
    std::ifstream in("/proc/" + std::to_string(run.p->pid()) + "/task/" +
                     std::to_string(run.p->pid()) + "/children");
    for (pid_t pid; in >> pid;) {
      if (pid != agents[0]) controller = pid;
    }
  }
  REQUIRE(controller > 0);
  REQUIRE(kill(controller, SIGSTOP) == 0);
  // The agent finds the controller silent after 1 s, drains for 1 s at most and exits; only then
  // does the controller die, as an operator's kill of a hung process would have it.
  const auto t0 = std::chrono::steady_clock::now();
  while (!run.agents_left().empty() && rig::test::seconds_since(t0) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(run.agents_left().empty());
  kill(controller, SIGKILL);
  const auto [out, ended] = run.end_within(5);
  CHECK(ended);
  const auto lines = rig::test::rig_run_lines(out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "rig run: controller was killed by signal 9 (Killed) without reporting the job's end");
  CHECK(lines[1] == "rig run: agent0     failed controller: sent nothing for 1 s");
  CHECK(lines[2] == "rig run: the job failed: controller: sent nothing for 1 s");
}
