// Rails through real rigd agents on loopback: between two agents, from and to the controller's
// host, the counts, ordering by memory with other work, validation, and failure.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

using rig::remote::Transfer;
using rig::test::Rigd;

namespace {

rig::remote::Job start(const std::string& key_file, const std::vector<Rigd*>& agents) {
  std::vector<rig::remote::Address> addresses;
  for (Rigd* a : agents) addresses.push_back(a->address());
  auto job = rig::remote::connect(rig::test::load_key(key_file), addresses);
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  return *job;
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<std::uint8_t>(x);
  }
  return v;
}

// `bytes` on `host` (a job's host or this process's), holding `v`.
rig::Buffer holding(const rig::Device& host, const std::vector<std::uint8_t>& v) {
  rig::Buffer b = rig::Buffer::make(host, v.size());
  if (host == rig::host()) {
    std::memcpy(b.access().data(), v.data(), v.size());
    return b;
  }
  rig::Buffer local = rig::Buffer::make(rig::host(), v.size());
  std::memcpy(local.access().data(), v.data(), v.size());
  rig::copy(b, local).wait();
  return b;
}

std::vector<std::uint8_t> contents(const rig::Buffer& b) {
  std::vector<std::uint8_t> out(b.size());
  if (b.device() == rig::host()) {
    std::memcpy(out.data(), b.access().data(), out.size());
    return out;
  }
  rig::Buffer local = rig::Buffer::make(rig::host(), b.size());
  rig::copy(local, b).wait();
  std::memcpy(out.data(), local.access().data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("a rail carries its transfers between two agents, round after round") {
  const auto key = rig::test::make_key_file("rail-agents");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = (3u << 20) + 17;  // chunks of 1 MiB and a tail
  rig::Buffer src = holding(ha, pattern(n, 1));
  rig::Buffer dst = holding(hb, std::vector<std::uint8_t>(n + 100, 0));
  rig::remote::Transfer t{src, 0, dst, 100, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE_MESSAGE(rail.ok(), (rail.ok() ? "" : rail.error()));
  CHECK(rail->from() == ha);
  CHECK(rail->to() == hb);
  CHECK(rail->sent() == 0);
  CHECK(rail->arrived() == 0);
  for (std::uint32_t round = 1; round <= 3; ++round) {
    if (round > 1) {
      // The source written between rounds: the write follows the earlier round's read (by
      // memory, at the agent), and the round after it reads what it wrote.
      rig::Buffer next = holding(rig::host(), pattern(n, round));
      rig::copy(src, next);
    }
    CHECK(rail->go() == round);
    rail->wait_arrived(round);
    CHECK(rail->arrived() >= round);
    CHECK(rail->sent() >= round);
    const auto got = contents(dst);
    const auto want = pattern(n, round);
    CHECK(std::memcmp(got.data() + 100, want.data(), n) == 0);
    CHECK(got[99] == 0);
  }
  job.close();
}

TEST_CASE("a rail runs from this process's host to an agent's and back, with several transfers") {
  const auto key = rig::test::make_key_file("rail-controller");
  Rigd a(key);
  auto job = start(key, {&a});
  const rig::Device& ha = job.hosts()[0];
  const std::vector<std::size_t> sizes = {1, 4096, (2u << 20) + 3};
  std::vector<rig::Buffer> here, there, back;
  std::vector<Transfer> out, in;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    here.push_back(holding(rig::host(), pattern(sizes[i], 10 + static_cast<std::uint32_t>(i))));
    there.push_back(holding(ha, std::vector<std::uint8_t>(sizes[i] + 8, 0)));
    back.push_back(holding(rig::host(), std::vector<std::uint8_t>(sizes[i], 0)));
    out.push_back({here[i], 0, there[i], 8, sizes[i]});
    in.push_back({there[i], 8, back[i], 0, sizes[i]});
  }
  auto to_agent = rig::remote::rail(out);
  auto from_agent = rig::remote::rail(in);
  REQUIRE_MESSAGE(to_agent.ok(), (to_agent.ok() ? "" : to_agent.error()));
  REQUIRE_MESSAGE(from_agent.ok(), (from_agent.ok() ? "" : from_agent.error()));
  CHECK(to_agent->from() == rig::host());
  CHECK(from_agent->to() == rig::host());
  for (std::uint32_t round = 1; round <= 4; ++round) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      // Host access waits for the round before that read the buffer.
      const auto v = pattern(sizes[i], round * 100 + static_cast<std::uint32_t>(i));
      std::memcpy(here[i].access().data(), v.data(), v.size());
    }
    CHECK(to_agent->go() == round);
    // The second rail's round reads what the first wrote: ordered by memory at the agent, with
    // no wait here.
    CHECK(from_agent->go() == round);
    from_agent->wait_arrived(round);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto v = pattern(sizes[i], round * 100 + static_cast<std::uint32_t>(i));
      CHECK(std::memcmp(back[i].access().data(), v.data(), v.size()) == 0);
    }
  }
  CHECK(to_agent->arrived() == 4);
  job.close();
}

TEST_CASE("rail() refuses what cannot be a rail, with the reason, and sends nothing") {
  const auto key = rig::test::make_key_file("rail-refusals");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  rig::Buffer a1 = rig::Buffer::make(ha, 100), a2 = rig::Buffer::make(ha, 100);
  rig::Buffer b1 = rig::Buffer::make(hb, 100), b2 = rig::Buffer::make(hb, 100);
  rig::Buffer here = rig::Buffer::make(rig::host(), 100);
  const auto refused = [](std::vector<Transfer> t) -> std::string {
    try {
      auto r = rig::remote::rail(t);
      return r.ok() ? "made" : "Error: " + r.error();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  };
  CHECK(refused({}) == "rig: rail: no transfers");
  CHECK(refused({{a1, 0, b1, 0, 0}}) == "rig: rail: transfer 0: it copies no bytes");
  CHECK(refused({{a1, 0, rig::Buffer(), 0, 1}}) == "rig: rail: transfer 0: an empty Buffer handle");
  CHECK(refused({{a1, 90, b1, 0, 20}}) ==
        "rig: rail: transfer 0: source range [90, 90+20) is outside its buffer of 100 bytes on " +
            ha.name());
  CHECK(refused({{a1, 0, b1, 0, 10}, {a2, 0, b1, 5, 10}}) ==
        "rig: rail: transfers 0 and 1 write overlapping bytes of their destination buffer on " +
            hb.name());
  CHECK(refused({{a1, 0, b1, 0, 10}, {b2, 0, b1, 50, 10}}) ==
        "rig: rail: transfer 1: its source is on " + hb.name() + ", transfer 0's on " + ha.name() +
            ": every source of a rail is on one machine's host");
  CHECK(refused({{a1, 0, b1, 0, 10}, {a2, 0, here, 0, 10}}) ==
        "rig: rail: transfer 1: its destination is on CPU, transfer 0's on " + hb.name() +
            ": every destination of a rail is on one machine's host");
  CHECK(refused({{a1, 0, a2, 0, 10}}) == "rig: rail: every source and destination is on " +
                                             ha.name() + ": a rail runs between two machines");
  auto sim = rig::remote::devices(ha, "SIM");
  REQUIRE(sim.ok());
  rig::Buffer on_sim = rig::Buffer::make(sim->at(0), 100);
  CHECK(refused({{on_sim, 0, b1, 0, 10}}) ==
        "rig: rail: transfer 0: the source buffer is on " + sim->at(0).name() +
            ", not on a machine's host: a rail runs between host memory");
  // Refused rails sent nothing: the job is whole, and a good rail still works.
  Transfer ok{a1, 0, b1, 0, 100};
  auto r = rig::remote::rail(std::span(&ok, 1));
  REQUIRE(r.ok());
  CHECK(r->go() == 1);
  r->wait_arrived(1);
  CHECK(!job.failed());
  job.close();
  CHECK(refused({{a1, 0, b1, 0, 10}}) == "Error: the job has closed");
}

TEST_CASE("host code on two agents drives a pipeline over two rails with no controller message") {
  const auto key = rig::test::make_key_file("rail-pipeline");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  rig::Buffer send_a = rig::Buffer::make(ha, 8), recv_a = rig::Buffer::make(ha, 8);
  rig::Buffer send_b = rig::Buffer::make(hb, 8), recv_b = rig::Buffer::make(hb, 8);
  rig::Buffer result_a = rig::Buffer::make(ha, 24), result_b = rig::Buffer::make(hb, 24);
  Transfer ab{send_a, 0, recv_b, 0, 8}, ba{send_b, 0, recv_a, 0, 8};
  auto there = rig::remote::rail(std::span(&ab, 1));
  auto back = rig::remote::rail(std::span(&ba, 1));
  REQUIRE(there.ok());
  REQUIRE(back.ok());
  const auto program = rig::test::test_kernels();
  auto image_a = rig::load(ha, program);
  auto image_b = rig::load(hb, program);
  REQUIRE(image_a.ok());
  REQUIRE(image_b.ok());
  const std::uint64_t rounds = 2000;
  const auto run = [&](const rig::Image& image, const rig::remote::Rail& out,
                       const rig::remote::Rail& in, const rig::Buffer& send,
                       const rig::Buffer& recv, std::uint64_t role, const rig::Buffer& result) {
    return rig::Run{
        image,
        "rail_pingpong",
        rig::Shape{},
        {rig::Arg::rail(out), rig::Arg::rail(in), rig::Arg::inout(send), rig::Arg::in(recv),
         rig::Arg::word(rounds), rig::Arg::word(role), rig::Arg::out(result)}};
  };
  const std::uint64_t va =
      rig::submit(ha, run(*image_a, *there, *back, send_a, recv_a, 0, result_a));
  const std::uint64_t vb =
      rig::submit(hb, run(*image_b, *back, *there, send_b, recv_b, 1, result_b));
  ha.wait(va);
  hb.wait(vb);
  for (const rig::Buffer* r : {&result_a, &result_b}) {
    const auto got = contents(*r);
    std::uint64_t words[3];
    std::memcpy(words, got.data(), sizeof words);
    CHECK(words[0] == rounds);
    CHECK(words[1] == 0);
    CHECK(words[2] == 0);
  }
  // The controller's counts followed.
  there->wait_arrived(rounds);
  back->wait_arrived(rounds);
  CHECK(there->arrived() == rounds);
  CHECK(back->sent() == rounds);
  // The rails are host code's now.
  CHECK_THROWS_AS(there->go(), std::invalid_argument);
  job.close();
}

TEST_CASE("kill -9 of the destination mid-round fails the job; every count is raised") {
  rig::test::ScaledTiming scaled;
  const auto key = rig::test::make_key_file("rail-kill");
  Rigd a(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  Rigd b(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = std::size_t{64} << 20;
  rig::Buffer src = rig::Buffer::make(ha, n), dst = rig::Buffer::make(hb, n);
  Transfer t{src, 0, dst, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      try {
        rail->wait_arrived(1000);
      } catch (const rig::Lost&) {
        ++woke;
      }
    });
  }
  const pid_t victim = b.job_pid(1);
  rail->go();
  rail->go();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(victim, SIGKILL) == 0);
  const auto cause = rig::test::wait_for_failure(job, t0, 2.0 * rig::test::sanitizer_slowdown);
  REQUIRE(cause.has_value());
  // B's death, seen here or first by A, the source, whose abort may come before B's end does.
  const std::string closed = b.name() + ": closed its connection";
  const bool one_of = *cause == closed || *cause == a.name() + " aborted: " + closed;
  CHECK_MESSAGE(one_of, *cause);
  for (auto& w : waiters) w.join();
  CHECK(woke == 4);
  CHECK(rail->sent() == rig::remote::rail_raised);
  CHECK(rail->arrived() == rig::remote::rail_raised);
  CHECK_THROWS_AS(rail->go(), rig::Lost);
  CHECK_THROWS_AS(rail->wait_sent(1), rig::Lost);
  job.close();
}

namespace {

// What rigd `a` logged as the root cause of its job `n` ("failed WHY": WHY), or the line itself.
std::string agent_cause(Rigd& a, int n) {
  const auto line = a.job_end(n);
  if (!line) return "(no end)";
  const std::string failed = "job " + std::to_string(n) + ": failed ";
  const auto at = line->find(failed);
  return at == std::string::npos ? *line : line->substr(at + failed.size());
}

}  // namespace

TEST_CASE("SIGSTOP of the destination mid-round: every process's cause is its silence") {
  rig::test::ScaledTiming scaled;  // 1 s of silence instead of 10 s
  const auto key = rig::test::make_key_file("rail-stop");
  Rigd a(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  Rigd b(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = std::size_t{64} << 20;
  rig::Buffer src = rig::Buffer::make(ha, n), dst = rig::Buffer::make(hb, n);
  Transfer t{src, 0, dst, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      try {
        if (i % 2 == 0)
          rail->wait_arrived(1000);
        else
          rail->wait_sent(1000);
      } catch (const rig::Lost&) {
        ++woke;
      }
    });
  }
  const pid_t stopped = b.job_pid(1);
  rail->go();
  rail->go();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(stopped, SIGSTOP) == 0);
  const auto cause = rig::test::wait_for_failure(job, t0, 5.0 * rig::test::sanitizer_slowdown);
  const double detected = rig::test::seconds_since(t0);
  // B stays stopped for a pause it can tell (paused_ms_min, 1 s, is not scaled): resumed, it reads
  // the aborts that came meanwhile before it judges anyone's silence (docs/failure.md).
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(1250));
  kill(stopped, SIGCONT);
  REQUIRE(cause.has_value());
  // B's silence, found here or by A, which aborts with it: both end 1 s after B's last byte.
  const std::string silence = b.name() + ": sent nothing for 1 s";
  const bool controller_ok = *cause == silence || *cause == a.name() + " aborted: " + silence;
  CHECK_MESSAGE(controller_ok, *cause);
  MESSAGE("SIGSTOP of the destination: the controller's cause '" << *cause << "' after " << detected
                                                                 << " s");
  CHECK(detected >= 0.9);
  CHECK(detected < 1.0 + 0.3 * rig::test::sanitizer_slowdown);
  for (auto& w : waiters) w.join();
  CHECK(woke == 4);
  CHECK(rail->sent() == rig::remote::rail_raised);
  CHECK(rail->arrived() == rig::remote::rail_raised);
  CHECK_THROWS_AS(rail->go(), rig::Lost);
  CHECK_THROWS_AS(rail->wait_arrived(1), rig::Lost);
  job.close();
  // A, the source, found B silent itself or heard the controller's abort; B, resumed, reads the
  // aborts that came while it was stopped before it judges anyone's silence.
  const std::string cause_a = agent_cause(a, 1);
  CHECK_MESSAGE((cause_a == silence || cause_a == "controller aborted: " + silence), cause_a);
  const std::string cause_b = agent_cause(b, 1);
  MESSAGE("A's cause '" << cause_a << "', B's '" << cause_b << "'");
  // Or A's reset: A, finding B silent, closed its connection over the chunks it could not send,
  // its abort among them. B learns of it by reading, or by the heartbeat its first tick after the
  // pause sends there (the broken pipe: that write fails before the controller's abort, unread
  // still, is read).
  const bool b_ok = ((cause_b.starts_with("controller aborted: ") ||
                      cause_b.starts_with(a.name() + " aborted: ")) &&
                     cause_b.ends_with(silence)) ||
                    cause_b == a.name() + ": closed its connection" ||
                    cause_b == a.name() + ": connection failed: broken pipe";
  CHECK_MESSAGE(b_ok, cause_b);
}

TEST_CASE("a child of fork sees its parent's rails raised and lost; the parent's rail goes on") {
  const auto key = rig::test::make_key_file("rail-fork");
  Rigd a(key);
  auto job = start(key, {&a});
  const rig::Device& ha = job.hosts()[0];
  const std::size_t n = (1u << 20) + 5;
  rig::Buffer here = holding(rig::host(), pattern(n, 1));
  rig::Buffer there = holding(ha, std::vector<std::uint8_t>(n, 0));
  Transfer t{here, 0, there, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  CHECK(rail->go() == 1);
  rail->wait_arrived(1);
  const std::string forked =
      "this process is a child of the job's controller (fork): the job's connections belong to "
      "the parent";
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(10);  // anything that waits for ever here fails the test instead of holding it
    int wrong = 0;
    auto check = [&](bool ok, const char* what) {
      if (ok) return;
      std::fprintf(stderr, "in the child of fork: %s\n", what);
      ++wrong;
    };
    auto expect_lost = [&](auto&& use, const char* what) {
      try {
        use();
        check(false, what);
      } catch (const rig::Lost& e) {
        check(std::string(e.what()) == forked, what);
      } catch (...) {
        check(false, what);
      }
    };
    check(rail->sent() == rig::remote::rail_raised, "sent()");
    check(rail->arrived() == rig::remote::rail_raised, "arrived()");
    expect_lost([&] { (void)rail->go(); }, "go()");
    expect_lost([&] { rail->wait_sent(2); }, "wait_sent()");
    expect_lost([&] { rail->wait_arrived(2); }, "wait_arrived()");
    _exit(wrong);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));  // not ended by the alarm
  CHECK(WEXITSTATUS(status) == 0);
  // The parent's rail: its counts as they were, and the next rounds carry new bytes.
  CHECK(rail->sent() == 1);
  CHECK(rail->arrived() == 1);
  for (std::uint32_t round = 2; round <= 3; ++round) {
    const auto v = pattern(n, round);
    std::memcpy(here.access().data(), v.data(), n);
    CHECK(rail->go() == round);
    rail->wait_arrived(round);
    CHECK(contents(there) == v);
  }
  CHECK_FALSE(job.failed().has_value());
  job.close();
}

TEST_CASE("rails dropped while the job is open end at both ends; the job goes on") {
  const auto key = rig::test::make_key_file("rail-drop");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = 4096;
  rig::Buffer here = holding(rig::host(), pattern(n, 1));
  rig::Buffer on_a = holding(ha, pattern(n, 2));
  rig::Buffer on_b = holding(hb, std::vector<std::uint8_t>(n, 0));
  for (int i = 0; i < 2; ++i) {
    // Agent to agent, controller to agent, agent to controller: a round each, then dropped.
    std::vector<Transfer> ts = {
        {on_a, 0, on_b, 0, n}, {here, 0, on_a, 0, n}, {on_b, 0, here, 0, n}};
    for (const Transfer& t : ts) {
      auto r = rig::remote::rail(std::span(&t, 1));
      REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
      CHECK(r->go() == 1);
      r->wait_arrived(1);
    }
    // The job is whole after the ends: a round trip to each agent.
    ha.wait(rig::submit(ha, std::span<const rig::Part>{}));
    hb.wait(rig::submit(hb, std::span<const rig::Part>{}));
    CHECK_MESSAGE(!job.failed(), job.failed().value_or(""));
  }
  job.close();
  CHECK(a.job_end(1).value_or("").ends_with("job 1: closed"));
  CHECK(b.job_end(1).value_or("").ends_with("job 1: closed"));
}
