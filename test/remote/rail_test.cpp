// Rails through real rigd agents on loopback: between two agents, from and to the controller's
// host, the counts, ordering by memory with other work, validation, and failure.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <signal.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

using rig::test::Rigd;
using rig::remote::Transfer;

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

TEST_CASE("a rail's last handle dropped while its job is open lets its ends go; the job goes on") {
  const auto key = rig::test::make_key_file("rail-drop");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  rig::Buffer on_a = holding(ha, pattern(4096, 7));
  rig::Buffer on_b = holding(hb, std::vector<std::uint8_t>(4096, 0));
  rig::Buffer here = holding(rig::host(), std::vector<std::uint8_t>(4096, 0));
  // Between two agents, from an agent to this process, and from this process to an agent: the
  // controller's RAIL_END goes to the source, in order, which passes it on after its last round.
  const std::vector<Transfer> rails = {
      {on_a, 0, on_b, 0, 4096}, {on_b, 0, here, 0, 4096}, {here, 0, on_a, 0, 4096}};
  for (const Transfer& t : rails) {
    {
      auto r = rig::remote::rail(std::span(&t, 1));
      REQUIRE(r.ok());
      CHECK(r->go() == 1);
      r->wait_arrived(1);
    }
    // The work sent after the drop is applied after the RAIL_END: a round trip to each machine.
    for (const rig::Device* h : {&ha, &hb}) {
      CHECK_NOTHROW(h->wait(rig::submit(*h, std::span<const rig::Part>{})));
    }
    CHECK(!job.failed());
  }
  // The ends hold the rails no more, and new ones work.
  auto again = rig::remote::rail(std::span(&rails[0], 1));
  REQUIRE(again.ok());
  CHECK(again->go() == 1);
  again->wait_arrived(1);
  CHECK(contents(on_b) == pattern(4096, 7));
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
  CHECK(refused({{a1, 0, a2, 0, 10}}) ==
        "rig: rail: every source and destination is on " + ha.name() +
            ": a rail runs between two machines");
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
    return rig::Run{image, "rail_pingpong", rig::Shape{},
                    {rig::Arg::rail(out), rig::Arg::rail(in), rig::Arg::inout(send),
                     rig::Arg::in(recv), rig::Arg::word(rounds), rig::Arg::word(role),
                     rig::Arg::out(result)}};
  };
  const std::uint64_t va = rig::submit(ha, run(*image_a, *there, *back, send_a, recv_a, 0, result_a));
  const std::uint64_t vb = rig::submit(hb, run(*image_b, *back, *there, send_b, recv_b, 1, result_b));
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
  // This process sees B's connection end, or A's abort for its own link to B first: either way
  // the cause names B's end.
  const std::string own = b.name() + ": closed its connection";
  CHECK_MESSAGE((*cause == own || *cause == a.name() + " aborted: " + own), *cause);
  for (auto& w : waiters) w.join();
  CHECK(woke == 4);
  CHECK(rail->sent() == rig::remote::rail_raised);
  CHECK(rail->arrived() == rig::remote::rail_raised);
  CHECK_THROWS_AS(rail->go(), rig::Lost);
  CHECK_THROWS_AS(rail->wait_sent(1), rig::Lost);
  job.close();
}
