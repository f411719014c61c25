// Fault tests with real processes and sockets on loopback: each checks the root cause on every
// process it can see and the bound on its detection. Liveness times are scaled down by 10 here
// (1 s of silence instead of 10 s) through the test-only timing setting; slow_test.cpp proves the
// real constants.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "remote/controller/controller.hpp"
#include "remote/controller/launch.hpp"
#include "remote/controller/member.hpp"
#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "remote/trust/handshake.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"
#include "rig/remote.hpp"
#include "support/fork_checks.hpp"
#include "support/holdings.hpp"
#include "support/job_fixtures.hpp"
#include "support/wire_peer.hpp"

using namespace std::chrono_literals;
using rig::test::cpu_seconds;
using rig::test::end_and_drain;
using rig::test::FakeAgent;
using rig::test::Process;
using rig::test::read_abort;
using rig::test::read_until;
using rig::test::Rigd;
using rig::test::send_message;

namespace {

constexpr int divisor = rig::test::scaled_divisor;
using rig::test::ScaledTiming;

// A receive buffer small enough that the peer's answers back up into its own queue at once.
constexpr int small_receive_bytes = 4096;

}  // namespace

TEST_CASE("bytes after the handshake that break the protocol fail the job, naming the problem") {
  const std::string key_file = rig::test::make_key_file("malformed");
  const auto key = rig::test::load_key(key_file);
  struct Case {
    std::vector<std::uint8_t> bytes;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{2, 0, 0, 0, 0x7f, 0}, "malformed message: unknown type 0x7f"},
      {{0xff, 0xff, 0xff, 0xff, 0x01},
       "malformed message: frame length 4294967295 over the maximum 4194304"},
      {{13, 0, 0, 0, 0x02, 90, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'},
       "malformed message: ABORT: reason length 90 past the end of a 12-byte body"},
  };
  for (const Case& c : cases) {
    FakeAgent agent;
    std::thread fake([&] {
      const int s = agent.accept_and_prove(key);
      FakeAgent::send_all(s, c.bytes);
      // Drain until the controller closes, as a well-behaved peer would.
      std::uint8_t buf[256];
      while (::read(s, buf, sizeof buf) > 0) {
      }
      ::close(s);
    });
    auto job = rig::remote::connect(key, {{"127.0.0.1", agent.port}});
    fake.join();
    REQUIRE_FALSE(job.ok());
    CHECK(job.error() == agent.name() + ": " + c.why);
  }
}

TEST_CASE("a truncated frame followed by the peer's close is its close, not a hang") {
  const auto key = rig::test::load_key(rig::test::make_key_file("truncated"));
  FakeAgent agent;
  std::thread fake([&] {
    const int s = agent.accept_and_prove(key);
    FakeAgent::send_all(s, {40, 0, 0, 0, 0x02, 1, 2});  // promises 40 bytes, sends 3
    ::close(s);
  });
  auto job = rig::remote::connect(key, {{"127.0.0.1", agent.port}});
  fake.join();
  REQUIRE_FALSE(job.ok());
  CHECK(job.error() == agent.name() + ": closed its connection");
}

TEST_CASE("a stopped agent fails the job with the silence cause, not before") {
  ScaledTiming scaled;
  const std::string key_file = rig::test::make_key_file("stop");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const pid_t child = a.job_pid(1);
  const auto t0 = std::chrono::steady_clock::now();
  kill(child, SIGSTOP);
  const auto cause = rig::test::wait_for_failure(*job, t0, 5);
  const double detected = rig::test::seconds_since(t0);
  kill(child, SIGCONT);
  REQUIRE(cause.has_value());
  CHECK(*cause == a.name() + ": sent nothing for 1 s");
  CHECK(detected >= 0.9);
  CHECK(detected < 1.3);
  job->close();
  // The agent, resumed, finds its controller gone or aborting: its job ends too.
  CHECK(a.job_end(1).has_value());
}

TEST_CASE("a connection that proves nothing is dropped, and the agent goes on serving") {
  const std::string key_file = rig::test::make_key_file("silent");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  const int s = rig::test::connect_loopback(a.port);
  const auto t0 = std::chrono::steady_clock::now();
  // The agent greets, then waits for a proof that never comes; after 1 s (scaled) it closes.
  std::uint8_t buf[256];
  ssize_t n;
  while ((n = ::read(s, buf, sizeof buf)) > 0) {
  }
  const double dropped = rig::test::seconds_since(t0);
  ::close(s);
  CHECK(n == 0);
  CHECK(dropped >= 0.9);
  CHECK(dropped < 2.0);
  ScaledTiming scaled;
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  job->close();
}

TEST_CASE("two agents killed within 10 ms: exactly one root cause on the controller") {
  const std::string key_file = rig::test::make_key_file("two");
  Rigd a(key_file), b(key_file);
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address(), b.address()});
  REQUIRE(job.ok());
  const pid_t ca = a.job_pid(1), cb = b.job_pid(1);
  kill(ca, SIGKILL);
  kill(cb, SIGKILL);
  const auto cause = rig::test::wait_for_failure(*job, std::chrono::steady_clock::now(), 5);
  REQUIRE(cause.has_value());
  const bool one_of = *cause == a.name() + ": closed its connection" ||
                      *cause == b.name() + ": closed its connection" ||
                      *cause == a.name() + " aborted: " + b.name() + ": closed its connection" ||
                      *cause == b.name() + " aborted: " + a.name() + ": closed its connection";
  CHECK_MESSAGE(one_of, *cause);
  // It never changes afterwards.
  std::this_thread::sleep_for(100ms);
  CHECK(job->failed() == cause);
  job->close();
}

TEST_CASE("a child of fork never uses its parent's job; the parent's goes on") {
  const std::string key_file = rig::test::make_key_file("fork");
  Rigd a(key_file);
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE(job.ok());
  const rig::Device host = job->hosts()[0];
  auto sims = rig::remote::devices(host, "SIM");
  REQUIRE(sims.ok());
  const rig::Device sim = sims->front();
  const rig::Buffer before = rig::Buffer::make(sim, 4096);
  // In the child every host and proxy of the job is lost from the start, with the fork's text, and
  // no use of one reaches the parent's loop or sockets.
  rig::test::in_fork_child([&](rig::test::ChildChecks& c) {
    const std::string forked = rig::test::forked_text;
    c.check(job->failed() == forked, "failed()");
    c.check(rig::failure(host) == forked && rig::failure(sim) == forked, "the devices' failure()");
    c.expect_lost([&] { (void)rig::Buffer::make(host, 64); }, "a buffer on the host");
    c.expect_lost([&] { (void)rig::Buffer::make(sim, 64); }, "a buffer on the proxy");
    c.expect_lost([&] { host.wait(rig::submit(host, std::span<const rig::Part>{})); }, "a submit");
    std::vector<std::uint8_t> bytes(4096, 7);
    c.expect_lost(
        [&] {
          rig::copy(before, 0, rig::Buffer::borrow(bytes.data(), bytes.size()), 0, 4096).wait();
        },
        "a copy");
    c.check(!rig::remote::devices(host, "SIM").ok(), "devices()");
    job->close();
  });
  // The parent's job goes on: a round trip, a copy there and back, then an orderly close.
  CHECK_FALSE(job->failed().has_value());
  host.wait(rig::submit(host, std::span<const rig::Part>{}));
  std::vector<std::uint8_t> out(4096), in(4096, 0);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(i * 13);
  rig::copy(before, 0, rig::Buffer::borrow(out.data(), out.size()), 0, out.size()).wait();
  rig::copy(rig::Buffer::borrow(in.data(), in.size()), 0, before, 0, in.size()).wait();
  CHECK(in == out);
  CHECK_FALSE(job->failed().has_value());
  job->close();
  CHECK(a.job_end(1).value_or("").find("closed") != std::string::npos);
}

TEST_CASE("an agent that dies while the job closes fails the job: the launcher hears the cause") {
  ScaledTiming scaled;
  const std::string key_file = rig::test::make_key_file("die-in-close");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  rig::test::ReportedJob r(rig::test::load_key(key_file), a);
  const pid_t agent = a.job_pid(1);
  kill(agent, SIGSTOP);  // it will never answer the close
  std::thread killer([agent] {
    std::this_thread::sleep_for(300ms);
    kill(agent, SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  (*r.job)->close();
  const double took = rig::test::seconds_since(t0);
  killer.join();
  CHECK(took >= 0.25);  // it waited for the agent, which never let go of the job
  CHECK(took < 2.5);    // and ended within the drain's bound (1 s scaled) after the death
  CHECK(r.lines() == "started\nfailed " + a.name() + ": closed its connection\n");
  CHECK_FALSE((*r.job)->failed().has_value());  // after a close, as after every close
}

TEST_CASE("an agent that falls silent while the job closes fails it with the silence cause") {
  ScaledTiming scaled;
  const std::string key_file = rig::test::make_key_file("silent-in-close");
  Rigd a(key_file, {"--test-timing-divisor", std::to_string(divisor)});
  const auto closed = rig::test::close_over_stopped_agent(key_file, a);
  // Silence for 1 s (scaled), then the drain's 1 s with a peer that never answers.
  CHECK(closed.took_s >= 0.9);
  CHECK(closed.took_s < 2.6);
  CHECK(closed.lines == "started\nfailed " + a.name() + ": sent nothing for 1 s\n");
}

TEST_CASE("RIG_REMOTE_AGENTS and RIG_REMOTE_KEY: every rule") {
  using rig::remote::parse_agents;
  auto ok = parse_agents("h100-b=10.0.0.2:41234,[fd00::2]=[fd00::2]:41234");
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].name == "h100-b");
  CHECK((*ok)[0].host == "10.0.0.2");
  CHECK((*ok)[0].port == 41234);
  CHECK((*ok)[1].name == "[fd00::2]");
  CHECK((*ok)[1].host == "fd00::2");
  CHECK(parse_agents("a=fd00::2:4123").error() ==
        "RIG_REMOTE_AGENTS: 'a=fd00::2:4123': an IPv6 address needs brackets, as [fd00::2]:PORT");
  CHECK(parse_agents("").error() == "RIG_REMOTE_AGENTS is empty");
  CHECK(parse_agents("a=1.2.3.4").error() == "RIG_REMOTE_AGENTS: 'a=1.2.3.4': no ':PORT'");
  CHECK(parse_agents("1.2.3.4:5").error() ==
        "RIG_REMOTE_AGENTS: '1.2.3.4:5': not NAME=ADDRESS:PORT");
  CHECK(parse_agents("a=1.2.3.4:0").error() ==
        "RIG_REMOTE_AGENTS: 'a=1.2.3.4:0': port '0' is not a number from 1 to 65535");
  CHECK(parse_agents("a=1.2.3.4:5,a=1.2.3.5:5").error() ==
        "RIG_REMOTE_AGENTS: 'a=1.2.3.5:5': the name a is given twice");
  CHECK(parse_agents("a=[fd00::2]4").error() ==
        "RIG_REMOTE_AGENTS: 'a=[fd00::2]4': a bracketed address must be followed by ':PORT'");
  const std::string hex64(64, 'a');
  CHECK(rig::remote::parse_launcher_key(hex64).ok());
  CHECK(rig::remote::parse_launcher_key("abc").error() ==
        "RIG_REMOTE_KEY has 3 characters, not 64 hexadecimal ones");
  CHECK(rig::remote::parse_launcher_key(std::string(63, 'a') + "g").error() ==
        "RIG_REMOTE_KEY has a character that is not hexadecimal");
}

TEST_CASE("launched() with malformed variables reports the failure on the descriptor") {
  CHECK_FALSE(rig::remote::launched().has_value());  // not launched: nothing to do
  int p[2];
  REQUIRE(pipe(p) == 0);
  setenv("RIG_REMOTE_REPORT", std::to_string(p[1]).c_str(), 1);
  setenv("RIG_REMOTE_AGENTS", "a=fd00::2:4123", 1);
  setenv("RIG_REMOTE_KEY", std::string(64, 'a').c_str(), 1);
  auto r = rig::remote::launched();
  REQUIRE(r.has_value());
  REQUIRE_FALSE(r->ok());
  const std::string why =
      "RIG_REMOTE_AGENTS: 'a=fd00::2:4123': an IPv6 address needs brackets, as [fd00::2]:PORT";
  CHECK(r->error() == why);
  CHECK(std::getenv("RIG_REMOTE_REPORT") == nullptr);
  CHECK(std::getenv("RIG_REMOTE_AGENTS") == nullptr);
  CHECK(std::getenv("RIG_REMOTE_KEY") == nullptr);
  CHECK((fcntl(p[1], F_GETFD) & FD_CLOEXEC) != 0);
  ::close(p[1]);
  char buf[512];
  const ssize_t n = ::read(p[0], buf, sizeof buf);
  ::close(p[0]);
  CHECK(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0) == "failed " + why + "\n");
  // A report descriptor that is not open: an Error, nothing written anywhere, and the agents and
  // the key gone from the environment all the same.
  setenv("RIG_REMOTE_REPORT", "987", 1);
  setenv("RIG_REMOTE_AGENTS", "a=127.0.0.1:9", 1);
  setenv("RIG_REMOTE_KEY", std::string(64, 'a').c_str(), 1);
  auto closed = rig::remote::launched();
  REQUIRE(closed.has_value());
  CHECK(closed->error() == "RIG_REMOTE_REPORT=987 names no open descriptor");
  CHECK(std::getenv("RIG_REMOTE_REPORT") == nullptr);
  CHECK(std::getenv("RIG_REMOTE_AGENTS") == nullptr);
  CHECK(std::getenv("RIG_REMOTE_KEY") == nullptr);
}

TEST_CASE("rig run with an agent that cannot start says so and fails") {
  Process run({rig::test::env("RIG_RIG"), "run", "--local", "2", "--rigd", "/bin/false", "--",
               "/bin/true"});
  std::string err;
  while (auto l = run.err_line(10'000)) err += *l + "\n";
  const int status = run.wait();
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(err == "rig run: agent0 could not start: it printed no listening line\n");
}

TEST_CASE("Ctrl-C on an agent: its job fails with 'interrupted', which the controller hears") {
  const std::string key_file = rig::test::make_key_file("ctrl-c");
  Rigd a(key_file, {"--once"});
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE(job.ok());
  REQUIRE(a.p->err_until("job: started by the controller at ").has_value());
  a.p->signal(SIGINT);
  const auto cause = rig::test::wait_for_failure(*job, std::chrono::steady_clock::now(), 5);
  REQUIRE(cause.has_value());
  CHECK(*cause == a.name() + " aborted: interrupted");
  CHECK(a.p->err_until("job: interrupted").has_value());
  CHECK(a.p->wait_for(5000));
  job->close();
}

TEST_CASE("a break ends close's wait within 200 ms; the job stays open; a later close finishes") {
  const auto key = rig::test::load_key(rig::test::make_key_file("break"));
  FakeAgent agent;
  std::atomic<bool> answer_close{false};
  std::thread fake([&] {
    rig::remote::FrameDecoder d;
    const int s = rig::test::accept_job(agent, key, d);
    REQUIRE(read_until<rig::remote::Close>(s, d));
    // Hold the close unanswered (heartbeats keep the job alive) until the test says so.
    while (!answer_close.load()) {
      send_message(s, rig::remote::Heartbeat{});
      std::this_thread::sleep_for(50ms);
    }
    send_message(s, rig::remote::Closed{});
    ::shutdown(s, SHUT_WR);
    std::uint8_t buf[256];
    while (::read(s, buf, sizeof buf) > 0) {
    }
    ::close(s);
  });
  auto job = rig::remote::connect(key, {{"127.0.0.1", agent.port}});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  std::thread breaker([] {
    std::this_thread::sleep_for(300ms);
    rig::remote::request_break();
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(job->close(), rig::remote::Break);
  const double waited = rig::test::seconds_since(t0);
  breaker.join();
  CHECK(waited >= 0.29);
  CHECK(waited < 0.3 + 0.2 + 0.1);
  CHECK_FALSE(job->failed().has_value());
  answer_close = true;
  job->close();  // waits again, and now the agent answers
  fake.join();
  CHECK_FALSE(job->failed().has_value());
}

TEST_CASE("a peer that stops reading while the controller sends: the send-progress cause") {
  ScaledTiming scaled;  // a stalled send fails the job after 1 s instead of 10 s
  const auto key = rig::test::load_key(rig::test::make_key_file("stall"));
  const auto stall = rig::test::stall_a_send(key, small_receive_bytes, 20);
  REQUIRE(stall.cause.has_value());
  CHECK(*stall.cause == stall.agent_name + ": a send made no progress for 1 s");
  // Not before 1 s without progress: the clock starts at the acknowledgement of the last byte the
  // peer's kernel took, which came after `before_last_byte_s`.
  CHECK(stall.detected_s >= stall.before_last_byte_s + 1.0);
  // Within 1 s of the last byte, plus 0.5 s for the 10 ms tick and a loaded machine's wake-ups
  // (a sanitizer's slower processes wake later still).
  CHECK(stall.detected_s <= stall.last_byte_s + 1.0 + 0.5 * rig::test::sanitizer_slowdown);
  CHECK(stall.queued_bytes > 0);
}

namespace {

// Dials 127.0.0.1:port and proves `key` as a controller of job `job`; returns the socket.
int dial_as_controller(const rig::remote::Key& key, int port, const rig::remote::JobId& job,
                       const std::string& agent_name, int receive_bytes = 0) {
  const int s = rig::test::connect_loopback(port, receive_bytes);
  auto hs = rig::remote::Handshake::dialer(key, {rig::remote::Role::controller, "controller", job,
                                                 agent_name, rig::remote::new_instance_id()});
  std::uint8_t buf[4096];
  while (!hs.done()) {
    const ssize_t n = ::read(s, buf, sizeof buf);
    REQUIRE(n > 0);
    hs.feed({buf, static_cast<std::size_t>(n)});
    FakeAgent::send_all(s, hs.take_output());
  }
  REQUIRE(hs.state() == rig::remote::Handshake::State::proven);
  return s;
}

}  // namespace

TEST_CASE("an agent told to dial itself refuses, and the job fails naming it") {
  const std::string key_file = rig::test::make_key_file("self");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  const int s = dial_as_controller(key, a.port, rig::remote::new_job_id(), "A");
  // Two names for one agent: as "A" it dials "A2", which is itself.
  send_message(s, rig::remote::Join{"A", {"A", "A2"}, {a.name(), a.name()}});
  rig::remote::FrameDecoder d;
  std::string reason;
  for (;;) {
    auto f = d.next();
    REQUIRE(f.ok());
    if (f->has_value()) {
      auto m = rig::remote::decode(**f);
      REQUIRE(m.ok());
      if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) {
        reason = abort->reason;
        break;
      }
      continue;
    }
    std::uint8_t buf[4096];
    const ssize_t n = ::read(s, buf, sizeof buf);
    REQUIRE(n > 0);
    d.feed({buf, static_cast<std::size_t>(n)});
  }
  ::close(s);
  CHECK(reason == "A2: is this process itself (the greeting carries this process's instance id)");
  CHECK(a.job_end(1).value_or("").find("failed A2: is this process itself") != std::string::npos);
}

TEST_CASE("an abort still arrives when the agent fails with bytes unread on both sides") {
  // Real times: the agent drains for up to 10 s, far longer than this peer stays busy.
  const std::string key_file = rig::test::make_key_file("unread-agent");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  const int s =
      dial_as_controller(key, a.port, rig::remote::new_job_id(), "A", small_receive_bytes);
  send_message(s, rig::remote::Join{"A", {"A"}, {a.name()}});
  rig::remote::FrameDecoder d;
  REQUIRE(read_until<rig::remote::Ready>(s, d));
  // From here this end reads nothing for a while. Empty submissions to the host, answered by
  // REACHEDs that back up behind our small window into the agent's queue (sent one at a time, a
  // moment apart, so that the agent reads them apart: a burst read at once is answered by one
  // REACHED); then a frame of an unknown type, which fails the agent's job; then bytes the agent
  // has still not read when it fails.
  constexpr long marks = 20'000;
  for (long i = 0; i < marks; ++i) {
    std::vector<std::uint8_t> one;
    rig::remote::encode(rig::remote::Submit{0, std::uint64_t(i + 1), {}}, one);
    FakeAgent::send_all(s, one);
    if (i % 4 == 3) std::this_thread::sleep_for(20us);
  }
  FakeAgent::send_all(s, {2, 0, 0, 0, 0x7f, 0});
  std::vector<std::uint8_t> after;
  for (int i = 0; i < 20'000; ++i) rig::remote::encode(rig::remote::Heartbeat{}, after);
  // Best effort: an agent that wrongly closed at once has reset the connection by now.
  (void)::send(s, after.data(), after.size(), MSG_NOSIGNAL);
  // This end stays busy a while longer: an agent that closed over its unread bytes, or gave up on
  // its queue, has lost the abort by the time we read.
  std::this_thread::sleep_for(500ms);
  // Everything queued before the failure went out ahead of the abort: the last submission's
  // value is reached, and so every one before it.
  std::uint64_t reached = 0;
  const auto reason = rig::test::read_abort_after_reached(s, d, reached);
  CHECK(reached == static_cast<std::uint64_t>(marks));
  REQUIRE(reason.has_value());
  CHECK(*reason == "controller: malformed message: unknown type 0x7f");
  CHECK(end_and_drain(s) == 0);  // the agent ended its side in order, no reset
  CHECK(a.job_end(1).value_or("").find("failed controller: malformed message: unknown type 0x7f") !=
        std::string::npos);
}

TEST_CASE("an abort still arrives when the controller fails behind bytes its peer has not read") {
  const auto key = rig::test::load_key(rig::test::make_key_file("unread-controller"));
  FakeAgent a, b;
  // Accepted sockets inherit the listener's buffer size and segment size: a offers a small window.
  rig::test::small_window(a.fd, small_receive_bytes);
  std::atomic<bool> read_now{false}, b_ends{false};
  std::optional<std::string> reason;
  long a_marks = 0;
  ssize_t a_end = 1;
  std::thread agent_a([&] {
    rig::remote::FrameDecoder d;
    const int s = rig::test::accept_job(a, key, d);
    // Busy: alive (heartbeats) but reading nothing, until the test says so.
    const auto t0 = std::chrono::steady_clock::now();
    while (!read_now.load() && rig::test::seconds_since(t0) < 20) {
      send_message(s, rig::remote::Heartbeat{});
      std::this_thread::sleep_for(50ms);
    }
    reason = read_abort<rig::remote::Submit>(s, d, a_marks);
    a_end = end_and_drain(s);
  });
  std::thread agent_b([&] {
    rig::remote::FrameDecoder d;
    const int s = rig::test::accept_job(b, key, d);
    const auto t0 = std::chrono::steady_clock::now();
    while (!b_ends.load() && rig::test::seconds_since(t0) < 20) {
      send_message(s, rig::remote::Heartbeat{});
      std::this_thread::sleep_for(50ms);
    }
    ::close(s);  // b's process ends: the controller's job fails
  });
  auto job = rig::remote::connect(key, {{"127.0.0.1", a.port}, {"127.0.0.1", b.port}});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  // Empty submissions to a's host, one SUBMIT each: more than the kernel's buffers on both ends
  // hold, so the rest waits in the controller's own queue. Once the kernel takes no more, a
  // submit blocks (its connection is sending an earlier message) until the job fails.
  const rig::Device host = job->hosts()[0];
  constexpr long submissions = 300'000;
  std::atomic<long> submitted{0};
  std::thread submitter([&] {
    try {
      for (long i = 0; i < submissions; ++i) {
        (void)rig::submit(host, std::span<const rig::Part>{});
        ++submitted;
      }
    } catch (const rig::Lost&) {
      // The job failed while this submit waited: expected once b ends.
    }
  });
  // Wait until the submitter is blocked (or done): its count stops moving.
  for (long last = -1; submitted.load() != last && submitted.load() < submissions;) {
    last = submitted.load();
    std::this_thread::sleep_for(300ms);
  }
  const auto t0 = std::chrono::steady_clock::now();
  b_ends = true;
  const auto cause = rig::test::wait_for_failure(*job, t0, 5);
  REQUIRE(cause.has_value());
  CHECK(*cause == b.name() + ": closed its connection");
  // a stays busy a while longer: a controller that closed at once has dropped its queue by then.
  std::this_thread::sleep_for(500ms);
  read_now = true;
  agent_a.join();
  agent_b.join();
  submitter.join();
  CHECK(a_marks > 0);
  REQUIRE(reason.has_value());
  CHECK(*reason == *cause);
  CHECK(a_end == 0);  // the controller ended its side in order, no reset
  job->close();
}

TEST_CASE(
    "out of descriptors, an agent drops its oldest stranger and takes the controller at once") {
  const std::string key_file = rig::test::make_key_file("nofile-stranger");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  const pid_t child = a.job_pid(1);
  // A stranger the agent greets and holds, and not one descriptor more for the child.
  const int stranger = rig::test::connect_loopback(a.port);
  std::uint8_t greeting[64];
  REQUIRE(::read(stranger, greeting, sizeof greeting) > 0);
  rig::test::NoDescriptorLeft limit(child);

  // The controller's connection finds no descriptor: the stranger's is given to it, at once, not
  // after the stranger's 10 s (the bound leaves room for a loaded machine).
  const auto t0 = std::chrono::steady_clock::now();
  auto job = rig::remote::connect(key, {a.address()});
  const double took_s = rig::test::seconds_since(t0);
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  CHECK(took_s < 1.0 * rig::test::sanitizer_slowdown);
  pollfd p{stranger, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  CHECK(::read(stranger, greeting, sizeof greeting) == 0);  // dropped: the agent closed it
  ::close(stranger);
  const auto drop = a.p->err_until("dropped the oldest", 5000);
  REQUIRE(drop.has_value());
  CHECK(drop->find("job 1: dropped the oldest connection that had not proven the key, to make "
                   "room (accept: Too many open files); more such drops are counted every 10 s") !=
        std::string::npos);
  REQUIRE(limit.give_back());
  const rig::Device host = job->hosts()[0];
  host.wait(rig::submit(host, std::span<const rig::Part>{}));
  job->close();
  CHECK(a.job_end(1).value_or("").find("job 1: closed") != std::string::npos);
}

TEST_CASE("out of descriptors with no stranger to drop, an agent leaves the connection waiting") {
  const std::string key_file = rig::test::make_key_file("nofile");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  const pid_t child = a.job_pid(1);
  // A stranger the agent greets: the child is serving, and its descriptors hold still from here.
  // Then it leaves, so that the agent has none to drop when it runs short.
  const int stranger = rig::test::connect_loopback(a.port);
  std::uint8_t greeting[64];
  REQUIRE(::read(stranger, greeting, sizeof greeting) > 0);
  const std::size_t with_stranger = rig::test::holdings(child).descriptors;
  ::close(stranger);
  REQUIRE(rig::test::within(
      5000, [&] { return rig::test::holdings(child).descriptors == with_stranger - 1; }));
  rig::test::NoDescriptorLeft limit(child);

  std::optional<rig::Result<rig::remote::Job>> job;
  std::chrono::steady_clock::time_point connected;
  std::thread controller([&] {
    job.emplace(rig::remote::connect(key, {a.address()}));
    connected = std::chrono::steady_clock::now();
  });
  const auto shortage = a.p->err_until("cannot accept a connection at ", 5000);
  REQUIRE(shortage.has_value());
  CHECK(shortage->find("job 1: cannot accept a connection at " + a.name() +
                       ": Too many open files: accepting again in 0.5 s") != std::string::npos);
  // Meanwhile the agent waits without spinning: a busy retry loop would burn most of a CPU.
  const double cpu_before = cpu_seconds(child);
  std::this_thread::sleep_for(1200ms);  // a window over two retries, not a synchronisation
  CHECK(cpu_seconds(child) - cpu_before < 0.3);
  const auto freed = std::chrono::steady_clock::now();
  REQUIRE(limit.give_back());
  controller.join();
  REQUIRE(job.has_value());
  // The connection was kept, not shed: the job starts on it soon after the descriptors return
  // (the accept within 0.5 s, then the handshake; the bound leaves room for a loaded machine).
  REQUIRE_MESSAGE(job->ok(), (job->ok() ? "" : job->error()));
  CHECK(std::chrono::duration<double>(connected - freed).count() < 2.0);
  const rig::Device host = (*job)->hosts()[0];
  host.wait(rig::submit(host, std::span<const rig::Part>{}));
  (*job)->close();
  CHECK(a.job_end(1).value_or("").find("job 1: closed") != std::string::npos);
}

TEST_CASE("an accept error other than a shortage ends serve with an Error naming it") {
  const std::string key_file = rig::test::make_key_file("broken-listener");
  Process agent({rig::test::env("RIG_TEST_AGENT"), key_file, "--break-listener"});
  const auto listening = agent.line();
  REQUIRE(listening.has_value());
  const auto at = rig::remote::parse_listening_line(*listening);
  REQUIRE(at.ok());
  REQUIRE(at->host == "127.0.0.1");
  const std::string port = std::to_string(at->port);
  CHECK(agent.line(5000) ==
        "error: cannot accept a connection at 127.0.0.1:" + port + ": Invalid argument");
  CHECK(agent.wait_for(5000));
  CHECK(WEXITSTATUS(agent.wait()) == 1);
}

TEST_CASE("work naming memory, an image or a device the job does not hold fails the job, named") {
  const std::string key_file = rig::test::make_key_file("unheld");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  struct Case {
    rig::remote::Message message;
    std::string cause;
  };
  rig::remote::WirePart copy;
  copy.kind = rig::remote::WirePart::copy;
  copy.src = 41;
  copy.bytes = 8;
  rig::remote::WirePart run;
  run.kind = rig::remote::WirePart::run;
  run.image = 7;
  run.entry = "fill_u32";
  const std::vector<Case> cases = {
      {rig::remote::Submit{0, 1, {copy}},
       "SUBMIT names memory 41, which the job does not hold on this machine"},
      {rig::remote::Submit{0, 1, {run}},
       "SUBMIT names program image 7, which the job does not hold on this machine"},
      {rig::remote::Make{3, 16},
       "MAKE names device 3, which the job has not opened on this machine"},
      {rig::remote::Free{5}, "FREE names memory 5, which the job does not hold on this machine"},
  };
  int job = 0;
  for (const Case& c : cases) {
    CAPTURE(c.cause);
    ++job;
    const int s = dial_as_controller(key, a.port, rig::remote::new_job_id(), "A");
    send_message(s, rig::remote::Join{"A", {"A"}, {a.name()}});
    rig::remote::FrameDecoder d;
    REQUIRE(read_until<rig::remote::Ready>(s, d));
    send_message(s, c.message);
    long ignored = 0;
    const auto reason = read_abort<rig::remote::Reached>(s, d, ignored);
    REQUIRE(reason.has_value());
    CHECK(*reason == c.cause);
    CHECK(end_and_drain(s) == 0);
    CHECK(a.job_end(job).value_or("") == "rigd[" + std::to_string(a.p->pid()) + "]: job " +
                                             std::to_string(job) + ": failed " + c.cause);
  }
}
