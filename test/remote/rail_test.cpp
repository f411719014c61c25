// Rails through real rigd agents on loopback: between two agents, from and to the controller's
// host, the counts, ordering by memory with other work, validation, and failure.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "http_get.hpp"
#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/fork_checks.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

using rig::remote::Transfer;
using rig::test::pattern;
using rig::test::Rigd;

namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif

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
  auto job = rig::test::start_job(key, {&a, &b});
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
  auto job = rig::test::start_job(key, {&a});
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
  auto job = rig::test::start_job(key, {&a, &b});
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
  auto job = rig::test::start_job(key, {&a, &b});
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
  CHECK_THROWS_WITH_AS(r->go(), "rig: go() of rail 1: the job has closed", std::invalid_argument);
}

namespace {

// rail_wait_raised, run on `r`'s machine, woke and logged both counts raised and no round started.
void check_host_code_saw_raised(Rigd& r) {
  const auto line = r.p->err_until("rail_wait_raised: ", 5000);
  REQUIRE(line.has_value());
  CHECK(
      line->find("rail_wait_raised: arrived 18446744073709551615 sent 18446744073709551615 go 0") !=
      std::string::npos);
}

}  // namespace

TEST_CASE("kill -9 of the destination mid-round fails the job; every count, every waiter") {
  rig::test::ScaledTiming scaled;
  const auto key = rig::test::make_key_file("rail-kill");
  Rigd a(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  Rigd b(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  // The round moves from here to B while B is killed; A's host code waits on a rail from B.
  const std::size_t n = std::size_t{256} << 20;
  rig::Buffer src = rig::Buffer::make(rig::host(), n), dst = rig::Buffer::make(hb, n);
  Transfer t{src, 0, dst, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  std::atomic<int> woke{0};
  rig::test::JobWaiters waiters(ha);
  for (int i = 0; i < 4; ++i) {
    waiters.threads.emplace_back([&] {
      try {
        rail->wait_arrived(1000);
      } catch (const rig::Lost&) {
        ++woke;
      }
    });
  }
  // Host code on the agent that survives waits on a rail whose destination it is.
  rig::Buffer back_src = rig::Buffer::make(hb, 8), back_dst = rig::Buffer::make(ha, 8);
  Transfer bt{back_src, 0, back_dst, 0, 8};
  auto back = rig::remote::rail(std::span(&bt, 1));
  REQUIRE(back.ok());
  auto image = rig::load(ha, rig::test::test_kernels());
  REQUIRE(image.ok());
  rig::submit(ha, rig::Run{*image, "rail_wait_raised", rig::Shape{}, {rig::Arg::rail(*back)}});
  REQUIRE(a.p->err_until("rail_wait_raised: waiting", 5000).has_value());
  const pid_t victim = b.job_pid(1);
  rail->go();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(victim, SIGKILL) == 0);
  const auto cause = rig::test::wait_for_failure(job, t0, 2.0 * rig::test::sanitizer_slowdown);
  REQUIRE(cause.has_value());
  // B's end is seen by the controller, or first by A, which aborts with it.
  CAPTURE(*cause);
  CHECK((*cause == b.name() + ": closed its connection" ||
         *cause == a.name() + " aborted: " + b.name() + ": closed its connection"));
  waiters.join();
  CHECK(woke == 4);
  CHECK(rail->sent() == rig::remote::rail_raised);
  CHECK(rail->arrived() == rig::remote::rail_raised);
  CHECK_THROWS_AS(rail->go(), rig::Lost);
  CHECK_THROWS_AS(rail->wait_sent(1), rig::Lost);
  // The host code woke, saw both counts raised, and could start no round.
  check_host_code_saw_raised(a);
  job.close();
}

namespace {

// One thread's share of the random rounds: rails of random transfers between the job's hosts and
// this process's, each round's sources written first with fresh bytes (a copy into an agent's host,
// or host access here), then go(), then every destination byte read back and compared. The reads
// back are ordered after the round by memory (at the agent, or by host access here), with no wait
// for arrival. Returns the number of bytes checked.
std::uint64_t random_rounds(const rig::remote::Job& job, std::uint32_t seed, int rounds,
                            int rounds_per_rail, std::size_t small_max, std::size_t large_max,
                            int large_one_in) {
  std::mt19937_64 rng(seed);
  const std::vector<rig::Device> hosts = {job.hosts()[0], job.hosts()[1], rig::host()};
  std::uint64_t checked = 0;
  std::uint32_t stamp = seed * 1000003u;
  for (int done = 0; done < rounds;) {
    // The ends: A to B, B to A, here to an agent, an agent to here.
    const int pair = static_cast<int>(rng() % 4);
    const rig::Device& from = pair == 2 ? hosts[2] : hosts[pair == 1 ? 1 : 0];
    const rig::Device& to =
        pair == 3 ? hosts[2] : hosts[pair == 0 ? 1 : (pair == 1 ? 0 : static_cast<int>(rng() % 2))];
    const std::size_t count = 1 + rng() % 16;
    const bool large = rng() % static_cast<std::uint64_t>(large_one_in) == 0;
    std::vector<Transfer> transfers;
    std::vector<rig::Buffer> sources, destinations;
    for (std::size_t i = 0; i < count; ++i) {
      // Sizes spread over every scale: 2^k bytes and a random part, k uniform.
      const std::size_t max = large && i == 0 ? large_max : small_max;
      const int bits =
          1 + static_cast<int>(rng() % static_cast<std::uint64_t>(std::bit_width(max)));
      const std::size_t bytes =
          std::max<std::size_t>(1, std::min(max, rng() % (std::size_t{1} << bits)));
      const std::size_t from_offset = rng() % 64, to_offset = rng() % 64;
      sources.push_back(rig::Buffer::make(from, bytes + from_offset));
      destinations.push_back(rig::Buffer::make(to, bytes + to_offset));
      transfers.push_back({sources.back(), from_offset, destinations.back(), to_offset, bytes});
    }
    auto rail = rig::remote::rail(transfers);
    REQUIRE_MESSAGE(rail.ok(), (rail.ok() ? "" : rail.error()));
    const int n = std::min(rounds - done, 1 + static_cast<int>(rng() % rounds_per_rail));
    // Staging here for the agents' ends, made once per rail: writing one again waits (host access)
    // for the copy of the round before that read it.
    std::vector<rig::Buffer> in_here, out_here;
    for (std::size_t i = 0; i < count; ++i) {
      if (from != rig::host())
        in_here.push_back(rig::Buffer::make(rig::host(), transfers[i].bytes));
      if (to != rig::host()) out_here.push_back(rig::Buffer::make(rig::host(), transfers[i].bytes));
    }
    for (int r = 1; r <= n; ++r, ++done) {
      std::vector<std::vector<std::uint8_t>> sent;
      for (std::size_t i = 0; i < count; ++i) {
        sent.push_back(pattern(transfers[i].bytes, ++stamp));
        if (from == rig::host()) {
          std::memcpy(sources[i].access().data() + transfers[i].from_offset, sent[i].data(),
                      sent[i].size());
        } else {
          std::memcpy(in_here[i].access().data(), sent[i].data(), sent[i].size());
          rig::copy(sources[i], transfers[i].from_offset, in_here[i], 0, sent[i].size());
        }
      }
      REQUIRE(rail->go() == static_cast<std::uint64_t>(r));
      // Every read back is queued before any is waited for: one wait for the round's bytes.
      if (to != rig::host()) {
        rig::Fence last;
        for (std::size_t i = 0; i < count; ++i) {
          last = rig::copy(out_here[i], 0, destinations[i], transfers[i].to_offset,
                           transfers[i].bytes);
        }
        last.wait();
      }
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t bytes = transfers[i].bytes;
        const std::byte* got = to == rig::host()
                                   ? destinations[i].access().data() + transfers[i].to_offset
                                   : out_here[i].access().data();
        if (std::memcmp(got, sent[i].data(), bytes) != 0) {
          FAIL("rail " << from.name() << " -> " << to.name() << " round " << r << " transfer " << i
                       << " of " << bytes << " bytes differs (seed " << seed << ")");
        }
        checked += bytes;
      }
    }
    CHECK(rail->arrived() <= static_cast<std::uint64_t>(n));
    rail->wait_arrived(static_cast<std::uint64_t>(n));
    CHECK(rail->sent() == static_cast<std::uint64_t>(n));
  }
  return checked;
}

void random_rounds_test(int rounds, std::size_t small_max, std::size_t large_max,
                        int large_one_in) {
  const auto key = rig::test::make_key_file("rail-random");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const std::uint32_t seed = static_cast<std::uint32_t>(std::random_device{}());
  INFO("seed " << seed);
  std::atomic<std::uint64_t> checked{0};
  std::vector<std::thread> threads;
  // A failed assertion in a thread ends that thread's rounds; the test raises it again here.
  std::vector<std::exception_ptr> thrown(4);
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        checked += random_rounds(job, seed + t, rounds / 4, 8, small_max, large_max, large_one_in);
      } catch (...) {
        thrown[t] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : thrown) {
    if (e) std::rethrow_exception(e);
  }
  MESSAGE(rounds << " rounds, " << checked.load() << " bytes checked, seed " << seed);
  CHECK(!job.failed());
  job.close();
}

}  // namespace

TEST_CASE("random rounds from 4 threads: every destination byte is what its source held") {
  random_rounds_test(sanitized ? 400 : 1200, 64 << 10, 4 << 20, 50);
}

TEST_CASE("slow: 10,000 random rounds of 1 B .. 64 MiB per transfer, 1 .. 16 transfers") {
  random_rounds_test(10000, 256 << 10, 64 << 20, 200);
}

TEST_CASE("a round asks its destination first only when work there comes before it") {
  // Round 1 follows slow work on A that writes its source and nothing on B, so B is not asked for
  // RAIL_READY (RAIL_GO ahead): a read of the destination sent to B right after go() must still
  // wait for the round's bytes (RAIL_AWAIT, riding on that read's SUBMIT). Round 2 follows that
  // read, still under way on B, so B is asked first (RAIL_EXPECT), and the read sees round 1's
  // bytes, not round 2's, which would otherwise arrive while it naps.
  const auto key = rig::test::make_key_file("rail-order");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  auto ia = rig::load(ha, rig::test::test_kernels());
  auto ib = rig::load(hb, rig::test::test_kernels());
  REQUIRE(ia.ok());
  REQUIRE(ib.ok());
  constexpr std::uint64_t words = 1024;
  constexpr std::size_t bytes = words * sizeof(std::uint32_t);
  // A's nap is far longer than a round trip on loopback, B's between the two.
  constexpr std::uint64_t nap_a_us = 200'000, nap_b_us = 50'000;
  rig::Buffer src = rig::Buffer::make(ha, bytes);
  rig::Buffer dst = rig::Buffer::make(hb, bytes);
  rig::Buffer seen1 = rig::Buffer::make(hb, bytes), seen2 = rig::Buffer::make(hb, bytes);
  Transfer t{src, 0, dst, 0, bytes};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  const auto fill = [&](std::uint32_t v) -> rig::Part {
    return rig::Run{*ia,
                    "fill_u32",
                    rig::Shape{},
                    {rig::Arg::out(src), rig::Arg::word(words), rig::Arg::word(v)}};
  };
  const auto nap = [](const rig::Image& image, std::uint64_t us) -> rig::Part {
    return rig::Run{image, "nap", rig::Shape{}, {rig::Arg::word(us)}};
  };
  const std::vector<rig::Part> slow_fill{nap(*ia, nap_a_us), fill(1)};
  rig::submit(ha, slow_fill);
  REQUIRE(rail->go() == 1);
  const std::vector<rig::Part> slow_read{nap(*ib, nap_b_us), rig::Copy{seen1, 0, dst, 0, bytes}};
  rig::submit(hb, slow_read);
  rig::submit(ha, fill(2));
  REQUIRE(rail->go() == 2);
  hb.wait(rig::submit(hb, rig::Copy{seen2, 0, dst, 0, bytes}));
  rail->wait_arrived(2);
  const auto words_of = [](const std::vector<std::uint8_t>& v) {
    std::vector<std::uint32_t> w(v.size() / sizeof(std::uint32_t));
    std::memcpy(w.data(), v.data(), v.size());
    return w;
  };
  CHECK(words_of(contents(seen1)) == std::vector<std::uint32_t>(words, 1));
  CHECK(words_of(contents(seen2)) == std::vector<std::uint32_t>(words, 2));
  CHECK(!job.failed());
  job.close();
}

TEST_CASE("work beside a large round goes on, on the rail's connection and at both ends") {
  const auto key = rig::test::make_key_file("rail-beside");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = sanitized ? std::size_t{64} << 20 : std::size_t{512} << 20;
  rig::Buffer here = rig::Buffer::make(rig::host(), n);
  rig::Buffer big_a = rig::Buffer::make(ha, n), big_b = rig::Buffer::make(hb, n);
  rig::Buffer small_here = holding(rig::host(), pattern(64, 7));
  rig::Buffer small_a = rig::Buffer::make(ha, 64), small_b = rig::Buffer::make(hb, 64);
  Transfer ab{big_a, 0, big_b, 0, n}, to_a{here, 0, big_a, 0, n};
  auto between = rig::remote::rail(std::span(&ab, 1));
  auto from_here = rig::remote::rail(std::span(&to_a, 1));
  REQUIRE(between.ok());
  REQUIRE(from_here.ok());
  SUBCASE("between two agents: work on either that uses other memory does not wait for it") {
    between->go();
    rig::copy(small_a, small_here).wait();
    rig::copy(small_b, small_here).wait();
    // Each took a round trip; the round's bytes take far longer.
    CHECK(between->arrived() == 0);
    between->wait_arrived(1);
  }
  SUBCASE("from this process: a submission on the rail's connection passes the round's chunks") {
    from_here->go();
    rig::copy(small_a, small_here).wait();
    CHECK(from_here->arrived() == 0);
    from_here->wait_arrived(1);
  }
  CHECK(contents(small_a) == pattern(64, 7));
  job.close();
}

namespace {

// TCP_INFO of each of this process's TCP connections to 127.0.0.1 at one of `ports`, as the kernel
// keeps it: the controller's own view of its links to the agents.
std::vector<tcp_info> tcp_infos_to(const std::vector<int>& ports) {
  std::vector<tcp_info> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    if (peer.sin_family != AF_INET) continue;
    const int port = ntohs(peer.sin_port);
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) continue;
    tcp_info info{};
    socklen_t info_len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) == 0) out.push_back(info);
  }
  return out;
}

// Bytes this process has received and sent on its TCP connections to `ports` (of 127.0.0.1).
std::pair<std::uint64_t, std::uint64_t> tcp_bytes_to(const std::vector<int>& ports) {
  std::uint64_t received = 0, sent = 0;
  for (const tcp_info& info : tcp_infos_to(ports)) {
    received += info.tcpi_bytes_received;
    sent += info.tcpi_bytes_acked;
  }
  return {received, sent};
}

// The port of the --metrics endpoint of `r`, started with "--metrics 127.0.0.1:0": the line rigd
// prints after its listening line.
int metrics_port(Rigd& r) {
  const auto line = r.p->line();
  REQUIRE_MESSAGE(line.has_value(), "rigd printed no metrics line");
  REQUIRE(line->starts_with("metrics 127.0.0.1:"));
  return std::stoi(line->substr(line->rfind(':') + 1));
}

// rigd's /status: the work of its jobs.
nlohmann::json work_of(int port) {
  auto r = rig::cli::http_get("127.0.0.1", port, "/status", 10'000);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
  REQUIRE(r->status == 200);
  return nlohmann::json::parse(r->body)["work"];
}

void pipeline_test(std::uint64_t rounds, std::size_t bytes) {
  const auto key = rig::test::make_key_file("rail-pipeline-count");
  Rigd a(key, {"--metrics", "127.0.0.1:0"}), b(key, {"--metrics", "127.0.0.1:0"});
  const int metrics_a = metrics_port(a), metrics_b = metrics_port(b);
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  rig::Buffer send_a = rig::Buffer::make(ha, bytes), recv_a = rig::Buffer::make(ha, bytes);
  rig::Buffer send_b = rig::Buffer::make(hb, bytes), recv_b = rig::Buffer::make(hb, bytes);
  rig::Buffer result_a = rig::Buffer::make(ha, 24), result_b = rig::Buffer::make(hb, 24);
  Transfer ab{send_a, 0, recv_b, 0, bytes}, ba{send_b, 0, recv_a, 0, bytes};
  auto there = rig::remote::rail(std::span(&ab, 1));
  auto back = rig::remote::rail(std::span(&ba, 1));
  REQUIRE(there.ok());
  REQUIRE(back.ok());
  const auto program = rig::test::test_kernels();
  auto image_a = rig::load(ha, program);
  auto image_b = rig::load(hb, program);
  REQUIRE(image_a.ok());
  REQUIRE(image_b.ok());
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
  const std::vector<int> ports = {a.port, b.port};
  const auto before = tcp_bytes_to(ports);
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t va =
      rig::submit(ha, run(*image_a, *there, *back, send_a, recv_a, 0, result_a));
  const std::uint64_t vb =
      rig::submit(hb, run(*image_b, *back, *there, send_b, recv_b, 1, result_b));
  ha.wait(va);
  hb.wait(vb);
  there->wait_arrived(rounds);
  back->wait_arrived(rounds);
  const double seconds = rig::test::seconds_since(t0);
  const auto after = tcp_bytes_to(ports);
  for (const rig::Buffer* r : {&result_a, &result_b}) {
    const auto got = contents(*r);
    std::uint64_t words[3];
    std::memcpy(words, got.data(), sizeof words);
    CHECK(words[0] == rounds);
    CHECK(words[1] == 0);
    CHECK(words[2] == 0);
  }
  // Every rail byte went between the agents: what reached this process is the runs' messages,
  // their answers and the counts, a few dozen bytes per round, against 2 * bytes per round.
  const std::uint64_t rail_bytes = 2 * rounds * bytes;
  const std::uint64_t received = after.first - before.first;
  const std::uint64_t sent = after.second - before.second;
  MESSAGE(rounds << " rounds of " << bytes << " B each way in " << seconds << " s ("
                 << seconds / static_cast<double>(rounds) * 1e6 << " us a round trip); "
                 << rail_bytes << " rail bytes between the agents; this process received "
                 << received << " B and sent " << sent << " B on its connections");
  CHECK(received < rail_bytes / 20);
  CHECK(sent < rail_bytes / 1000);
  // Host code waiting for each round read most of them off the connection itself (the read lane:
  // docs/rails.md), not the agent's loop. A round whose wait began after it had arrived, or that
  // came while the socket was the loop's, the loop read: host code on a loaded machine (a
  // sanitizer's build beside other tests) is often not waiting when its round comes.
  for (const int port : {metrics_a, metrics_b}) {
    const auto work = work_of(port);
    const std::uint64_t arrived = work["rail_rounds_arrived"];
    const std::uint64_t host_read = work["rail_rounds_host_read"];
    MESSAGE("agent of metrics port " << port << ": " << host_read << " of " << arrived
                                     << " rounds read by host code itself");
    CHECK(arrived == rounds);
    CHECK(host_read > (sanitized ? 0 : rounds / 2));
  }
  // The controller's counts followed, and the rails are host code's now.
  CHECK(there->arrived() == rounds);
  CHECK(back->sent() == rounds);
  CHECK_THROWS_AS(there->go(), std::invalid_argument);
  job.close();
}

// Segments carrying data that this process has received from and sent to 127.0.0.1:`port`: with
// TCP_NODELAY, one a write at least.
std::pair<std::uint64_t, std::uint64_t> tcp_data_segments_to(int port) {
  std::uint64_t in = 0, out = 0;
  for (const tcp_info& info : tcp_infos_to({port})) {
    in += info.tcpi_data_segs_in;
    out += info.tcpi_data_segs_out;
  }
  return {in, out};
}

}  // namespace

// The news of a round the controller started that nobody waits for does not cost a write a round:
// the source's sent count (the destination's arrived count says it too), and RAIL_AWAIT to the
// destination, ride on their connection's next write or go at most later_news_delay_ms (1 ms)
// late. Rounds of go() and wait_arrived, one at a time, each take tens of microseconds; sent at
// once or whenever the loop went idle, the source's count and the RAIL_AWAIT took a write each
// round on each connection (the count of writes below was then the count of rounds).
TEST_CASE(
    "rounds the controller starts cost the source no write to it, nor it one to the "
    "destination, each round") {
  const auto key = rig::test::make_key_file("rail-news");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  rig::Buffer src = holding(job.hosts()[0], pattern(64, 3));
  rig::Buffer dst = rig::Buffer::make(job.hosts()[1], 64);
  Transfer t{src, 0, dst, 0, 64};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  rail->wait_arrived(rail->go());  // the destination's first round may be asked ahead
  const std::uint64_t rounds = 2000;
  const auto a_before = tcp_data_segments_to(a.port), b_before = tcp_data_segments_to(b.port);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < rounds; ++i) rail->wait_arrived(rail->go());
  const double ms = rig::test::seconds_since(t0) * 1e3;
  const auto a_after = tcp_data_segments_to(a.port), b_after = tcp_data_segments_to(b.port);
  const std::uint64_t from_source = a_after.first - a_before.first;
  const std::uint64_t to_destination = b_after.second - b_before.second;
  MESSAGE(rounds << " rounds in " << ms << " ms; segments from the source " << from_source
                 << ", to the destination " << to_destination);
  // A write a millisecond (twice that: the loop's clock is read once a turn, so its timers may
  // fire early by up to a millisecond), a heartbeat and a few more. A run slower than half a
  // millisecond a round (a sanitizer's build on a loaded machine) cannot tell the two apart.
  const double bound = 2 * ms + 10;
  CHECK(static_cast<double>(from_source) <= bound);
  CHECK(static_cast<double>(to_destination) <= bound);
  CHECK(rail->sent() == rounds + 1);
  CHECK(contents(dst) == pattern(64, 3));
  job.close();
}

TEST_CASE("host code on two agents drives a pipeline over two rails; no rail byte through here") {
  pipeline_test(sanitized ? 1000 : 5000, 4096);
}

TEST_CASE("slow: 100,000 rounds of a host-code pipeline, no rail byte through the controller") {
  pipeline_test(100000, 4096);
}

// Four threads of host code start rounds of one rail at once: host code's own writes (when the
// link is idle and no earlier round waits for the loop), its posts and the loop's sends of them
// interleave. A round sent twice, or out of turn, fails the job ("RAIL_CHUNK ... where ... was
// due" at the destination); a round lost leaves wait_arrived waiting.
TEST_CASE(
    "host code on four threads drives one rail at once: each round numbered once, all arrive") {
  const auto key = rig::test::make_key_file("rail-threads");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const auto source = pattern(64, 11);
  const rig::Buffer send = holding(ha, source);
  const rig::Buffer recv = rig::Buffer::make(hb, source.size());
  const rig::Buffer result = rig::Buffer::make(ha, 16);
  Transfer t{send, 0, recv, 0, source.size()};
  auto r = rig::remote::rail(std::span(&t, 1));
  REQUIRE(r.ok());
  auto image = rig::load(ha, rig::test::test_kernels());
  REQUIRE(image.ok());
  const std::uint64_t calls = sanitized ? 500 : 5000;
  const std::uint64_t n = 4 * calls;
  ha.wait(rig::submit(
      ha, rig::Run{*image,
                   "rail_go_threads",
                   rig::Shape{},
                   {rig::Arg::rail(*r), rig::Arg::word(calls), rig::Arg::out(result)}}));
  const auto got = contents(result);
  std::uint64_t words[2];
  std::memcpy(words, got.data(), sizeof words);
  CHECK(words[0] == n * (n + 1) / 2);
  CHECK(words[1] == 0);
  r->wait_arrived(n);
  CHECK(r->arrived() == n);
  CHECK(r->sent() == n);
  CHECK(contents(recv) == source);
  job.close();
}

TEST_CASE("go() blocks while 64 MiB of the rail's rounds have not arrived") {
  const auto key = rig::test::make_key_file("rail-flow");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const std::size_t n = std::size_t{1} << 20;
  rig::Buffer src = rig::Buffer::make(job.hosts()[0], n),
              dst = rig::Buffer::make(job.hosts()[1], n);
  Transfer t{src, 0, dst, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  std::uint64_t most = 0;
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t round = rail->go();
    most = std::max(most, round - rail->arrived());
  }
  MESSAGE("at most " << most << " rounds of 1 MiB not yet arrived after a go()");
  // 64 MiB in flight before a go() that returns, and its own round.
  CHECK(most <= 65);
  rail->wait_arrived(300);
  job.close();
}

TEST_CASE("record() gives a host's machine, address and rail maker, a proxy's device id only") {
  const auto key = rig::test::make_key_file("rail-record");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const auto host = rig::remote::record(job.hosts()[0]);
  REQUIRE(host.has_value());
  CHECK(host->of == rig::remote::Record::Of::host);
  // The machine's name is as the job names it ("HOST:PORT#2" if this process dialed that port
  // before, as an earlier test's agent may have had it); the address is as dialed.
  const std::string machine = job.hosts()[0].name().substr(std::string("CPU@").size());
  CHECK(host->machine == machine);
  CHECK(host->address == a.name());
  CHECK(host->device == 0);
  CHECK((host->make_rail == &rig::remote::rail));
  auto sims = rig::remote::devices(job.hosts()[0], "SIM");
  REQUIRE(sims.ok());
  const auto proxy = rig::remote::record(sims->at(1));
  REQUIRE(proxy.has_value());
  CHECK(proxy->of == rig::remote::Record::Of::device);
  CHECK(proxy->machine == machine);
  CHECK(proxy->device != 0);
  CHECK((proxy->make_rail == nullptr));
  CHECK(!rig::remote::record(rig::host()).has_value());
  job.close();
}

TEST_CASE(
    "several rounds in flight, of many chunks and of one, arrive from either kind of source") {
  const auto key = rig::test::make_key_file("rail-in-flight");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  for (const std::size_t n : {std::size_t{16} << 20, std::size_t{64}}) {
    for (const bool from_here : {true, false}) {
      CAPTURE(n);
      CAPTURE(from_here);
      const rig::Device& from = from_here ? rig::host() : job.hosts()[0];
      rig::Buffer src = rig::Buffer::make(from, n), dst = rig::Buffer::make(job.hosts()[1], n);
      Transfer t{src, 0, dst, 0, n};
      auto rail = rig::remote::rail(std::span(&t, 1));
      REQUIRE(rail.ok());
      const std::uint64_t rounds = n > 1024 ? 4 : 200;
      for (std::uint64_t r = 1; r <= rounds; ++r) CHECK(rail->go() == r);
      // A stall here is a bug to see, not a test that hangs.
      const auto t0 = std::chrono::steady_clock::now();
      while (rail->arrived() < rounds && rig::test::seconds_since(t0) < 20) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      CHECK(rail->arrived() == rounds);
      rail->wait_arrived(rounds);
    }
  }
  CHECK(!job.failed());
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

// Two agents on scaled times (1 s of silence instead of 10 s) in one job, and a rail of `n` bytes
// from A's host memory to B's.
struct ScaledRail {
  ScaledRail(const std::string& tag, std::size_t n)
      : key(rig::test::make_key_file(tag)),
        a(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)}),
        b(key, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)}),
        job(rig::test::start_job(key, {&a, &b})),
        src(rig::Buffer::make(job.hosts()[0], n)),
        dst(rig::Buffer::make(job.hosts()[1], n)) {
    Transfer t{src, 0, dst, 0, n};
    auto made = rig::remote::rail(std::span(&t, 1));
    REQUIRE(made.ok());
    rail = std::move(*made);
  }
  rig::test::ScaledTiming scaled;
  std::string key;
  Rigd a, b;
  rig::test::ScopedJob job;
  rig::Buffer src, dst;
  rig::remote::Rail rail;
};

// SIGSTOP of `victim`'s job process until the job has failed: the controller's cause and how long
// after the stop it came. The victim stays stopped for a pause it can tell (paused_ms_min, 1 s, is
// not scaled): resumed, it reads the aborts that came meanwhile before it judges anyone's silence
// (docs/failure.md).
std::pair<std::string, double> stop_for_a_while(Rigd& victim, rig::test::ScopedJob& job) {
  const pid_t stopped = victim.job_pid(1);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(stopped, SIGSTOP) == 0);
  const auto cause = rig::test::wait_for_failure(job, t0, 5.0 * rig::test::sanitizer_slowdown);
  const double detected = rig::test::seconds_since(t0);
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(1250));
  kill(stopped, SIGCONT);
  REQUIRE(cause.has_value());
  return {*cause, detected};
}

TEST_CASE("SIGSTOP of the destination mid-round: every process's cause is its silence") {
  ScaledRail s("rail-stop", std::size_t{64} << 20);
  Rigd& a = s.a;
  Rigd& b = s.b;
  auto& job = s.job;
  auto* rail = &s.rail;
  std::atomic<int> woke{0};
  rig::test::JobWaiters waiters(job.hosts()[0]);
  for (int i = 0; i < 4; ++i) {
    waiters.threads.emplace_back([&, i] {
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
  rail->go();
  rail->go();
  const auto [cause, detected] = stop_for_a_while(b, job);
  // B's silence, found here or by A, which aborts with it: both end 1 s after B's last byte.
  const std::string silence = b.name() + ": sent nothing for 1 s";
  const bool controller_ok = cause == silence || cause == a.name() + " aborted: " + silence;
  CHECK_MESSAGE(controller_ok, cause);
  MESSAGE("SIGSTOP of the destination: the controller's cause '" << cause << "' after " << detected
                                                                 << " s");
  CHECK(detected >= 0.9);
  CHECK(detected < 1.0 + 0.3 * rig::test::sanitizer_slowdown);
  waiters.join();
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
  // pause sends there (refused with a broken pipe, which is A's close too, before the
  // controller's abort, unread still, is read).
  const bool b_ok = ((cause_b.starts_with("controller aborted: ") ||
                      cause_b.starts_with(a.name() + " aborted: ")) &&
                     cause_b.ends_with(silence)) ||
                    cause_b == a.name() + ": closed its connection";
  CHECK_MESSAGE(b_ok, cause_b);
}

// Host code at a rail's destination that waits for a round reads the connection itself (the read
// lane), asleep in poll() on it: the loop still judges the source's silence, and wakes the reader.
TEST_CASE("SIGSTOP of a source while host code at the destination reads the link: on time, woken") {
  ScaledRail s("rail-stop-reader", 8);
  Rigd& a = s.a;
  Rigd& b = s.b;
  auto& job = s.job;
  const rig::Device& hb = job.hosts()[1];
  auto image = rig::load(hb, rig::test::test_kernels());
  REQUIRE(image.ok());
  rig::submit(hb, rig::Run{*image, "rail_wait_raised", rig::Shape{}, {rig::Arg::rail(s.rail)}});
  REQUIRE(b.p->err_until("rail_wait_raised: waiting", 5000).has_value());
  // Heartbeats come and go meanwhile (each gives the link back to B's loop, which lends it again).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto [cause, detected] = stop_for_a_while(a, job);
  const std::string silence = a.name() + ": sent nothing for 1 s";
  CHECK_MESSAGE((cause == silence || cause == b.name() + " aborted: " + silence), cause);
  MESSAGE("SIGSTOP of the source: the controller's cause '" << cause << "' after " << detected
                                                            << " s");
  CHECK(detected >= 0.9);
  CHECK(detected < 1.0 + 0.3 * rig::test::sanitizer_slowdown);
  // The reader woke, saw both counts raised, and could start no round.
  check_host_code_saw_raised(b);
  job.close();
  const std::string cause_b = agent_cause(b, 1);
  CHECK_MESSAGE((cause_b == silence || cause_b == "controller aborted: " + silence), cause_b);
}

TEST_CASE("a child of fork sees its parent's rails raised and lost; the parent's rail goes on") {
  const auto key = rig::test::make_key_file("rail-fork");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const rig::Device& ha = job.hosts()[0];
  const std::size_t n = (1u << 20) + 5;
  rig::Buffer here = holding(rig::host(), pattern(n, 1));
  rig::Buffer there = holding(ha, std::vector<std::uint8_t>(n, 0));
  Transfer t{here, 0, there, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE(rail.ok());
  CHECK(rail->go() == 1);
  rail->wait_arrived(1);
  rig::test::in_fork_child([&](rig::test::ChildChecks& c) {
    c.check(rail->sent() == rig::remote::rail_raised, "sent()");
    c.check(rail->arrived() == rig::remote::rail_raised, "arrived()");
    c.expect_lost([&] { (void)rail->go(); }, "go()");
    c.expect_lost([&] { rail->wait_sent(2); }, "wait_sent()");
    c.expect_lost([&] { rail->wait_arrived(2); }, "wait_arrived()");
  });
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
  auto job = rig::test::start_job(key, {&a, &b});
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
