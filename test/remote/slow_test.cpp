// The liveness rules with their real constants: 10 s of silence, a 10 s handshake deadline, 10 s
// without send progress, rig run's 11 s for an agent after the controller's end, an opener longer
// than the silence rule, a join that times out, an agent silent during close; rigd stopped while a
// peer will not close, which waits out the real 10 s drain; and the standing test of strangers,
// 5,000 of them against one rigd while 20 jobs run through it. Slow by nature (about two minutes in
// all), so in the `slow` suite, which CI runs too.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "remote/io/address.hpp"
#include "remote/limits.hpp"
#include "rig/remote.hpp"
#include "support/holdings.hpp"
#include "support/job_fixtures.hpp"
#include "support/rig_run.hpp"
#include "support/rigd_fixtures.hpp"
#include "support/strangers.hpp"
#include "support/wire_peer.hpp"

using namespace std::chrono_literals;
using rig::test::Rigd;

TEST_CASE("SIGSTOP an agent: the controller fails with the silence cause between 9 and 11 s") {
  const std::string key_file = rig::test::make_key_file("slow-stop");
  Rigd a(key_file);
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE(job.ok());
  const pid_t child = a.job_pid(1);
  const auto t0 = std::chrono::steady_clock::now();
  kill(child, SIGSTOP);
  const auto cause = rig::test::wait_for_failure(*job, t0, 15);
  const double detected = rig::test::seconds_since(t0);
  kill(child, SIGCONT);
  REQUIRE(cause.has_value());
  CHECK(*cause == a.name() + ": sent nothing for 10 s");
  CHECK(detected >= 9.0);
  CHECK(detected <= 11.0);
  job->close();
}

TEST_CASE("a connection that proves nothing is dropped at 10 s; the agent still serves") {
  const std::string key_file = rig::test::make_key_file("slow-silent");
  Rigd a(key_file);
  const int s = rig::test::connect_loopback(a.port);
  const auto t0 = std::chrono::steady_clock::now();
  std::uint8_t buf[256];
  ssize_t n;
  while ((n = ::read(s, buf, sizeof buf)) > 0) {
  }
  const double dropped = rig::test::seconds_since(t0);
  ::close(s);
  CHECK(n == 0);
  CHECK(dropped >= 9.0);
  CHECK(dropped <= 11.0);
  auto job = rig::remote::connect(rig::test::load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  job->close();
}

TEST_CASE("a peer that stops reading while the controller sends: the cause within 10 s + fill") {
  const auto key = rig::test::load_key(rig::test::make_key_file("slow-stall"));
  // The system's own buffer sizes: the fill is what a real peer's kernel takes before it stops.
  const auto stall = rig::test::stall_a_send(key, 0, 30);
  REQUIRE(stall.cause.has_value());
  CHECK(*stall.cause == stall.agent_name + ": a send made no progress for 10 s");
  // Not before 10 s without progress: the clock starts at the acknowledgement of the last byte the
  // peer's kernel took, which came after `before_last_byte_s`.
  CHECK(stall.detected_s >= stall.before_last_byte_s + 10.0);
  // Within 10 s + the fill (the time to the last byte) + 1 s for the 100 ms tick and a loaded
  // machine's wake-ups.
  CHECK(stall.detected_s <= stall.last_byte_s + 10.0 + 1.0);
  CHECK(stall.queued_bytes > 0);
}

TEST_CASE("rig run: an agent that goes silent is stopped 11 s after the controller ends") {
  rig::test::RigRun run("slow-agent-silent", 2, {}, {rig::test::env("RIG_TEST_LAUNCHED")});
  REQUIRE(run.p->line() == "started");
  const auto agents = run.agent_pids();
  REQUIRE(agents.size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  kill(agents[0], SIGSTOP);
  // 10 s of silence fail the job; the controller's close drains for at most 10 s; agent0, still
  // running 11 s after the controller's end, gets SIGTERM, which a stopped process does not act
  // on, and SIGKILL 2 s later. Then 1 s of margin.
  const double earliest_s = 10.0 + 11.0 + 2.0;
  const double bound_s = earliest_s + 10.0 + 1.0;
  const auto [out, ended] = run.end_within(bound_s);
  const double elapsed = rig::test::seconds_since(t0);
  CHECK_MESSAGE(ended, "rig run still running " << bound_s << " s after the SIGSTOP");
  CHECK(elapsed >= earliest_s);
  CHECK(elapsed < bound_s);
  rig::test::check_agent0_failed_the_job(
      out, "stopped, still running 11 s after the controller ended (killed 2 s after SIGTERM)",
      "agent0: sent nothing for 10 s");
  if (ended) CHECK(WEXITSTATUS(run.p->wait()) == 1);
  CHECK(run.agents_left().empty());
}

TEST_CASE("an opener of 12 s, past the 10 s silence rule: the job goes on") {
  const std::string key_file = rig::test::make_key_file("slow-opener-real");
  rig::test::Process a({rig::test::env("RIG_TEST_AGENT"), key_file, "--slow-opener", "12000"});
  const auto line = a.line();
  REQUIRE(line.has_value());
  const auto at = rig::remote::parse_listening_line(*line);
  REQUIRE(at.ok());
  auto job = rig::remote::connect(rig::test::load_key(key_file), {{"127.0.0.1", at->port}});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const auto t0 = std::chrono::steady_clock::now();
  auto opened = rig::remote::devices(job->hosts()[0], "SLOW");
  CHECK(rig::test::seconds_since(t0) >= 12.0);
  CHECK_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error()));
  CHECK((opened.ok() && !opened->empty()));
  CHECK(job->failed() == std::nullopt);
  job->close();
  CHECK(a.line(5000).value_or("(no line within 5 s)") == "opening");
  CHECK(a.line(5000).value_or("(no line within 5 s)") == "closed");
}

TEST_CASE("a join that times out at 10 s names both machines that did not connect") {
  const std::string key_file = rig::test::make_key_file("slow-join");
  Rigd a(key_file);
  const auto hung = rig::test::hang_a_join(rig::test::load_key(key_file), a.address());
  CHECK(hung.error == a.name() + " aborted: " + a.name() + " and " + hung.fake_name +
                          " did not connect to each other within 10 s");
  CHECK(hung.took_s >= 10.0);
  CHECK(hung.took_s <= 11.0);
}

TEST_CASE("an agent that falls silent while the job closes fails it after the real 10 s") {
  const std::string key_file = rig::test::make_key_file("slow-silent-in-close");
  rig::test::Rigd a(key_file);
  const auto closed = rig::test::close_over_stopped_agent(key_file, a);
  // 10 s of silence, then the drain's 10 s with a peer that never answers, and 1 s of margin.
  CHECK(closed.took_s >= 10.0);
  CHECK(closed.took_s < 21.0);
  CHECK(closed.lines == "started\nfailed " + a.name() + ": sent nothing for 10 s\n");
}

TEST_CASE(
    "rigd stopped while a controller neither reads nor closes: the real 10 s drain, then "
    "exit 0, both lines, the job process gone") {
  const std::string key_file = rig::test::make_key_file("slow-rigd-stuck-peer");
  rig::test::RigdProcess a({"--key", key_file});
  a.listening();
  const auto waiting = a.err_until("job 1: waiting for a controller in process ");
  REQUIRE(waiting.has_value());
  const pid_t child = std::stoi(waiting->substr(waiting->rfind(' ') + 1));
  const int peer = rig::test::prove_as_controller(a.port, rig::test::load_key(key_file));
  REQUIRE(a.err_until("job 1: started by the controller at ").has_value());
  const auto t0 = std::chrono::steady_clock::now();
  kill(a.pid, SIGTERM);
  const auto status = a.wait_for(20'000);
  const double took_s = rig::test::seconds_since(t0);
  REQUIRE_MESSAGE(status.has_value(), "rigd did not stop within 20 s");
  std::vector<std::string> rest;
  while (auto l = a.err_line(1000)) rest.push_back(*l);
  std::string log;
  for (const auto& l : rest) log += l + "\n";
  INFO(log);
  CHECK((WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status)) == 0);
  // The drain's 10 s, within the watchdog's 15 s.
  CHECK(took_s >= 9.5);
  CHECK(took_s < 14);
  const std::string me = "rigd[" + std::to_string(a.pid) + "]: ";
  REQUIRE(rest.size() >= 2);
  CHECK(rest[rest.size() - 2] == me + "job 1: failed interrupted");
  CHECK(rest.back() == me + "stopped by signal 15");
  const bool gone = rig::test::gone_within(child, 2000);
  if (!gone) kill(child, SIGKILL);
  CHECK(gone);
  ::close(peer);
}

TEST_CASE("5,000 strangers knock while 20 jobs run through one rigd: each starts within 1 s") {
  rig::test::raise_descriptor_limit();
  const std::string key_file = rig::test::make_key_file("slow-strangers");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  // What a job's process may hold at its peak with strangers at their cap (2048 of a few KiB each,
  // over the 4-5 MiB a job's process holds anyway); before issue 13 each cost about 66 KiB, and
  // 5,000 of them about 330 MiB.
  [[maybe_unused]] constexpr std::int64_t peak_kib_max = 32 * 1024;  // not under sanitizers
  rig::test::Strangers strangers(a.port);
  // 5,000 at once, the kinds in turn: idle, a proof's length only, slow (a byte every 0.5 s),
  // garbage, a truncated proof and the end of its side; then one more every millisecond, the
  // oldest closed to keep 5,000 open, all through the 20 jobs.
  strangers.open_mixed(5000);
  strangers.knock(1000, 5000);
  double slowest_start_s = 0;
  std::int64_t peak_kib = 0;
  std::size_t descriptors_max = 0;
  for (int n = 1; n <= 20; ++n) {
    CAPTURE(n);
    const pid_t job = a.job_pid(n);
    const auto t0 = std::chrono::steady_clock::now();
    auto j = rig::remote::connect(key, {a.address()});
    const double start_s = rig::test::seconds_since(t0);
    REQUIRE_MESSAGE(j.ok(), (j.ok() ? "" : j.error()));
    CHECK(start_s < 1.0 * rig::test::sanitizer_slowdown);
    slowest_start_s = std::max(slowest_start_s, start_s);
    const rig::Device host = j->hosts()[0];
    host.wait(rig::submit(host, std::span<const rig::Part>{}));
    CHECK(j->failed() == std::nullopt);
    const auto h = rig::test::holdings(job);
    j->close();
    CHECK(a.job_end(n).value_or("").ends_with("job " + std::to_string(n) + ": closed"));
    peak_kib = std::max(peak_kib, h.peak_kib);
    descriptors_max = std::max(descriptors_max, h.descriptors);
    // Strangers at their cap, the job's own connection, and what the process holds anyway.
    CHECK(h.descriptors <= rig::remote::strangers_max + 32);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(h.peak_kib < peak_kib_max);  // a sanitizer's own memory says nothing of the agent's
#endif
  }
  strangers.stop();
  MESSAGE(strangers.opened() << " strangers knocked; the slowest start took " << slowest_start_s
                             << " s; a job's process held at most " << peak_kib << " KiB and "
                             << descriptors_max << " descriptors");
}
