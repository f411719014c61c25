// Remote devices through real rigd agents on loopback: devices(), buffers, copies of every size
// both ways, program runs, ordering across machines, flow control and loss.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/alarm.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

using rig::test::pattern;
using rig::test::Rigd;
using namespace std::chrono_literals;

namespace {

// Sanitizer builds run these tests several times slower: they keep every kind of case but move
// fewer bytes and make fewer submissions (the plain build runs the full sizes).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
constexpr std::size_t copy_bytes_max = sanitized ? std::size_t{4} << 20 : std::size_t{256} << 20;
constexpr int random_submissions = sanitized ? 2000 : 10000;
constexpr int signal_rounds = sanitized ? 300 : 2000;

std::vector<rig::Device> sims(const rig::remote::Job& job, std::size_t machine) {
  auto d = rig::remote::devices(job.hosts().at(machine), "SIM");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error()));
  return *d;
}

}  // namespace

TEST_CASE("devices() gives named proxies with the agent's arch and budget, the same each time") {
  const auto key = rig::test::make_key_file("proxy-devices");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  for (std::size_t m = 0; m < 2; ++m) {
    const Rigd& agent = m == 0 ? a : b;
    const auto d = sims(job, m);
    REQUIRE(d.size() == 2);
    CHECK(d[0].name() == "SIM:0@" + agent.name());
    CHECK(d[1].name() == "SIM:1@" + agent.name());
    CHECK(d[0].kind() == rig::Kind::sim);
    CHECK(d[0].arch() == "sim");
    CHECK(d[0].budget() == (std::uint64_t{1} << 30));
    CHECK(sims(job, m) == d);  // the same proxies, not new ones
    // SIM devices of one machine reach each other and their host, not another machine's.
    CHECK(rig::reaches(d[0], d[1]));
    CHECK(rig::reaches(d[0], job.hosts()[m]));
    CHECK(rig::reaches(d[0], rig::host()));
  }
  CHECK_FALSE(rig::reaches(sims(job, 0)[0], sims(job, 1)[0]));
  auto cuda = rig::remote::devices(job.hosts()[0], "CUDA");
  REQUIRE_FALSE(cuda.ok());
  CHECK(cuda.error() == a.name() + ": serves no devices of kind CUDA");
  CHECK_THROWS_AS(rig::remote::devices(rig::host(), "SIM"), std::invalid_argument);
  job.close();
  auto after = rig::remote::devices(job.hosts()[0], "SIM");
  CHECK_FALSE(after.ok());
}

TEST_CASE("copies of 1 B to 256 MiB reach a remote device and come back, every byte") {
  MESSAGE("copies up to " << (copy_bytes_max >> 20) << " MiB");
  const auto key = rig::test::make_key_file("proxy-copies");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const rig::Device sim = sims(job, 0)[0];
  const rig::Device remote_host = job.hosts()[0];
  std::uint32_t seed = 1;
  for (std::size_t n :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{65537}, std::size_t{1} << 20,
        (std::size_t{3} << 20) + 5, std::size_t{64} << 20, std::size_t{256} << 20}) {
    CAPTURE(n);
    for (const rig::Device& d : {sim, remote_host}) {
      CAPTURE(d.name());
      const auto in = pattern(n, seed++);
      std::vector<std::uint8_t> out(n + 2, 0xA5);
      auto there = rig::Buffer::make(d, n);
      rig::copy(there, rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n));
      auto back = rig::Buffer::borrow(out.data() + 1, n);
      const rig::Fence f = rig::copy(back, there);
      f.wait();
      back.access();
      CHECK(std::memcmp(out.data() + 1, in.data(), n) == 0);
      CHECK(out[0] == 0xA5);
      CHECK(out[n + 1] == 0xA5);
    }
  }
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE(
    "a program loaded on a remote SIM device runs, and a copy back after it sees its output") {
  const auto key = rig::test::make_key_file("proxy-run");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const rig::Device sim = sims(job, 0)[1];
  auto image = rig::load(sim, rig::test::test_kernels());
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  constexpr std::uint32_t count = 10000;
  std::vector<std::uint32_t> dst(count), src(count), out(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    dst[i] = i;
    src[i] = 7 * i + 1;
  }
  auto rdst = rig::Buffer::make(sim, count * 4);
  auto rsrc = rig::Buffer::make(sim, count * 4);
  rig::copy(rdst, rig::Buffer::borrow(dst.data(), count * 4));
  rig::copy(rsrc, rig::Buffer::borrow(src.data(), count * 4));
  const rig::Part run = rig::Run{
      *image,
      "mix_u32",
      rig::Shape::linear(1),
      {rig::Arg::inout(rdst), rig::Arg::in(rsrc), rig::Arg::word(count), rig::Arg::word(5)}};
  rig::submit(sim, run);
  rig::copy(rig::Buffer::borrow(out.data(), count * 4), rdst).wait();
  for (std::uint32_t i = 0; i < count; ++i) {
    REQUIRE(out[i] == dst[i] * 3 + src[i] + 5);
  }
  // An entry the program does not have: the agent's rig refuses the run and the job fails.
  const rig::Part bad = rig::Run{*image, "no_such_entry", rig::Shape::linear(1), {}};
  const auto t0 = std::chrono::steady_clock::now();
  rig::submit(sim, bad);
  const auto cause = rig::test::wait_for_failure(job, t0, 5);
  REQUIRE(cause.has_value());
  CHECK(cause->rfind(a.name() + " aborted: rig: part 0: the program has no entry point", 0) == 0);
  CHECK_THROWS_AS(rig::Buffer::make(sim, 16), rig::Lost);
  job.close();
}

namespace {

// One SUBMIT of copies from the controller's memory, into a host buffer of the agent and into
// SIM memory, then a run over what that copy placed; with `behind_work`, after slow work that
// writes both destinations first (so every byte is in before its turn).
void check_placed(std::string_view name, const std::vector<std::string>& agent_env) {
  const auto key = rig::test::make_key_file(std::string(name));
  Rigd a(key, {}, agent_env);
  auto job = rig::test::start_job(key, {&a});
  const rig::Device sim = sims(job, 0)[0];
  const rig::Device remote_host = job.hosts()[0];
  auto image = rig::load(sim, rig::test::test_kernels());
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  // Several of the agent's 4 MiB pieces, and a tail; a quarter of that under the sanitizers.
  const std::size_t n = sanitized ? (std::size_t{2} << 20) + 3 : (std::size_t{9} << 20) + 3;
  const std::size_t words = n / 4;
  auto fill = [&](const rig::Buffer& b, std::uint32_t value) {
    return rig::Part{rig::Run{*image,
                              "fill_u32",
                              rig::Shape::linear(1),
                              {rig::Arg::out(b), rig::Arg::word(words), rig::Arg::word(value)}}};
  };
  std::uint32_t seed = 100;
  for (bool behind_work : {false, true}) {
    CAPTURE(behind_work);
    auto on_host = rig::Buffer::make(remote_host, 2 * n);
    auto on_sim = rig::Buffer::make(sim, n);
    const auto p1 = pattern(n, seed++), p2 = pattern(n, seed++), p3 = pattern(n, seed++);
    auto b1 = rig::Buffer::borrow(const_cast<std::uint8_t*>(p1.data()), n);
    auto b2 = rig::Buffer::borrow(const_cast<std::uint8_t*>(p2.data()), n);
    auto b3 = rig::Buffer::borrow(const_cast<std::uint8_t*>(p3.data()), n);
    if (behind_work) {
      // Slow work (a nap of 300 ms, whatever the SIM's latency) writes both destinations first:
      // the copies must land after it.
      const rig::Part fills[] = {
          rig::Run{*image, "nap", rig::Shape::linear(1), {rig::Arg::word(300'000)}},
          fill(on_host, 7), fill(on_sim, 7)};
      rig::submit(sim, fills);
    }
    // One SUBMIT: two copies into one host buffer that overlap (the later one's bytes win), one
    // into SIM memory, then a run that writes over the start of what that copy placed.
    rig::Copy c1{on_host, 0, b1, 0, n}, c2{on_host, n / 2, b2, 0, n}, c3{on_sim, 0, b3, 0, n};
    const rig::Part parts[] = {
        c1, c2, c3,
        rig::Run{*image,
                 "fill_u32",
                 rig::Shape::linear(1),
                 {rig::Arg::out(on_sim), rig::Arg::word(16), rig::Arg::word(9)}}};
    rig::submit(sim, parts);
    std::vector<std::uint8_t> host_out(2 * n, 0xA5), sim_out(n, 0xA5);
    rig::copy(rig::Buffer::borrow(host_out.data(), 2 * n), on_host);
    rig::copy(rig::Buffer::borrow(sim_out.data(), n), on_sim).wait();
    // The copies decide every byte of the host buffer up to 1.5 n (the fill, which they follow,
    // wrote only below n).
    std::vector<std::uint8_t> host_model(n / 2 + n), sim_model = p3;
    std::memcpy(host_model.data(), p1.data(), n);
    std::memcpy(host_model.data() + n / 2, p2.data(), n);
    const std::uint32_t nine = 9;
    for (std::size_t i = 0; i < 16; ++i) std::memcpy(&sim_model[4 * i], &nine, 4);
    host_out.resize(n / 2 + n);
    CHECK(host_out == host_model);
    CHECK(sim_out == sim_model);
  }
  CHECK_FALSE(job.failed());
  job.close();
}

}  // namespace

TEST_CASE(
    "copies from the controller's memory land in part order, after the work before them, whether "
    "their bytes come before their turn or after") {
  SUBCASE("SIM copies that take their time: pieces handed one by one into SIM memory") {
    // Each SIM operation takes 200 ms: the copy into SIM memory goes through staged pieces.
    check_placed("proxy-placed", {"RIG_SIM_LATENCY_US=200000"});
  }
  SUBCASE("SIM memory the agent writes itself: bytes read straight from the socket into it") {
    check_placed("proxy-placed-direct", {});
  }
}

TEST_CASE(
    "a copy from a remote host's memory, or a SIM device's, sees none of the work submitted after "
    "it") {
  // Its bytes are written to the socket from the agent's buffer itself: the work after it (a run
  // on that device that overwrites the buffer) must wait until the write has read them all.
  const auto key = rig::test::make_key_file("proxy-from-memory");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const std::size_t n = sanitized ? std::size_t{8} << 20 : std::size_t{64} << 20;
  for (std::uint32_t round = 0; round < 4; ++round) {
    CAPTURE(round);
    const rig::Device remote = round % 2 == 0 ? job.hosts()[0] : sims(job, 0)[0];
    CAPTURE(remote.name());
    auto image = rig::load(remote, rig::test::test_kernels());
    REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
    auto there = rig::Buffer::make(remote, n);
    const auto in = pattern(n, 300 + round);
    rig::copy(there, rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n));
    std::vector<std::uint8_t> first(n), second(n);
    rig::copy(rig::Buffer::borrow(first.data(), n), there);
    const rig::Part fill = rig::Run{
        *image,
        "fill_u32",
        rig::Shape::linear(1),
        {rig::Arg::out(there), rig::Arg::word(n / 4), rig::Arg::word(0x01010101u * (7 + round))}};
    rig::submit(remote, fill);
    rig::copy(rig::Buffer::borrow(second.data(), n), there).wait();
    rig::Buffer::borrow(first.data(), n).access();
    CHECK(first == in);
    CHECK(std::all_of(second.begin(), second.end(),
                      [&](std::uint8_t b) { return b == 0x07 + round; }));
  }
  CHECK_FALSE(job.failed());
  job.close();
}

namespace {

// One thread's share of the randomized test: its own buffers on every device of the job, and the
// model of their contents that every submission is checked against.
struct RandomWorker {
  static constexpr std::size_t words = 64;
  struct Slot {
    rig::Buffer buffer;
    std::vector<std::uint32_t> model;
    int machine;  // -1: this process
  };
  std::vector<Slot> slots;
  std::vector<std::vector<std::uint32_t>> local_memory;  // what local slots borrow
  std::vector<rig::Image> images;                        // per machine
  std::vector<std::vector<rig::Device>> proxies;         // per machine
  std::uint64_t state;

  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  std::size_t pick(std::size_t n) { return static_cast<std::size_t>(next() % n); }

  void run(int operations) {
    for (int i = 0; i < operations; ++i) {
      const std::size_t what = pick(10);
      if (what < 6) {
        copy_op();
      } else if (what < 9) {
        run_op();
      } else {
        check_op();
      }
    }
  }

  // A copy between two slots rig can copy between: one machine's, or this process's and one.
  void copy_op() {
    const Slot* src = &slots[pick(slots.size())];
    Slot* dst = &slots[pick(slots.size())];
    if (src->machine >= 0 && dst->machine >= 0 && src->machine != dst->machine) return;
    if (src->machine < 0 && dst->machine < 0) return;  // a local copy tests nothing remote
    const std::size_t n = 1 + pick(words);
    const std::size_t so = pick(words - n + 1), d_o = pick(words - n + 1);
    if (src == dst && so != d_o) return;  // overlapping copies within one buffer: not modelled
    rig::copy(dst->buffer, d_o * 4, src->buffer, so * 4, n * 4);
    std::memmove(dst->model.data() + d_o, src->model.data() + so, n * 4);
  }

  // mix_u32 on a SIM device of one machine, over two of that machine's slots.
  void run_op() {
    const int m = static_cast<int>(pick(proxies.size()));
    std::vector<Slot*> mine;
    for (Slot& s : slots) {
      if (s.machine == m) mine.push_back(&s);
    }
    Slot* dst = mine[pick(mine.size())];
    Slot* src = mine[pick(mine.size())];
    if (dst == src) return;
    const std::uint32_t k = static_cast<std::uint32_t>(next());
    const rig::Device& d = proxies[m][pick(proxies[m].size())];
    rig::Image image = images[m];
    if (image.device() != d) return;  // the program is loaded on the machine's first SIM
    const rig::Part run = rig::Run{image,
                                   "mix_u32",
                                   rig::Shape::linear(1),
                                   {rig::Arg::inout(dst->buffer), rig::Arg::in(src->buffer),
                                    rig::Arg::word(words), rig::Arg::word(k)}};
    rig::submit(d, run);
    for (std::size_t i = 0; i < words; ++i) dst->model[i] = dst->model[i] * 3u + src->model[i] + k;
  }

  // Brings a remote slot's bytes back and compares them with the model now.
  void check_op() {
    Slot& s = slots[pick(slots.size())];
    if (s.machine < 0) return;
    std::vector<std::uint32_t> got(words);
    rig::copy(rig::Buffer::borrow(got.data(), words * 4), s.buffer).wait();
    compare(got, s);
  }

  // Threads other than the test's may not use doctest's assertions: a mismatch throws.
  static void compare(const std::vector<std::uint32_t>& got, const Slot& s) {
    for (std::size_t i = 0; i < words; ++i) {
      if (got[i] != s.model[i]) {
        throw std::runtime_error("word " + std::to_string(i) + " of a buffer on " +
                                 s.buffer.device().name() + " is " + std::to_string(got[i]) +
                                 ", the model says " + std::to_string(s.model[i]));
      }
    }
  }

  void check_all() {
    for (Slot& s : slots) {
      std::vector<std::uint32_t> got(words);
      if (s.machine < 0) {
        auto bytes = s.buffer.access();
        std::memcpy(got.data(), bytes.data(), words * 4);
      } else {
        rig::copy(rig::Buffer::borrow(got.data(), words * 4), s.buffer).wait();
      }
      compare(got, s);
    }
  }
};

}  // namespace

TEST_CASE("10,000 random submissions from 4 threads across two machines match a sequential model") {
  const std::uint64_t seed = [] {
    const char* s = std::getenv("RIG_TEST_SEED");
    return s != nullptr ? std::strtoull(s, nullptr, 10)
                        : static_cast<std::uint64_t>(
                              std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  MESSAGE("seed " << seed << " (RIG_TEST_SEED=" << seed << " repeats it)");
  const auto key = rig::test::make_key_file("proxy-random");
  const std::vector<std::string> env = {"RIG_SIM_LATENCY_US=0-150",
                                        "RIG_SIM_SEED=" + std::to_string(seed)};
  Rigd a(key, {}, env), b(key, {}, env);
  auto job = rig::test::start_job(key, {&a, &b});
  std::vector<std::vector<rig::Device>> proxies = {sims(job, 0), sims(job, 1)};
  std::vector<rig::Image> images;
  for (auto& p : proxies) {
    auto image = rig::load(p[0], rig::test::test_kernels());
    REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
    images.push_back(*image);
  }
  constexpr int threads = 4;
  constexpr int per_thread = random_submissions / threads;
  MESSAGE(random_submissions << " submissions");
  std::vector<RandomWorker> workers(threads);
  for (int t = 0; t < threads; ++t) {
    RandomWorker& w = workers[t];
    w.state = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(t) + 1;
    w.images = images;
    w.proxies = proxies;
    w.local_memory.resize(3, std::vector<std::uint32_t>(RandomWorker::words));
    auto add = [&](rig::Buffer b, int machine, std::uint32_t tag) {
      RandomWorker::Slot s{std::move(b), std::vector<std::uint32_t>(RandomWorker::words), machine};
      for (std::size_t i = 0; i < RandomWorker::words; ++i) s.model[i] = tag * 1000 + i;
      rig::copy(s.buffer, rig::Buffer::borrow(s.model.data(), RandomWorker::words * 4)).wait();
      w.slots.push_back(std::move(s));
    };
    std::uint32_t tag = 1 + 100 * static_cast<std::uint32_t>(t);
    for (auto& mem : w.local_memory) {
      RandomWorker::Slot s{rig::Buffer::borrow(mem.data(), RandomWorker::words * 4),
                           std::vector<std::uint32_t>(RandomWorker::words), -1};
      for (std::size_t i = 0; i < RandomWorker::words; ++i) mem[i] = s.model[i] = tag * 1000 + i;
      ++tag;
      w.slots.push_back(std::move(s));
    }
    for (int m = 0; m < 2; ++m) {
      for (const rig::Device& d : proxies[m])
        add(rig::Buffer::make(d, RandomWorker::words * 4), m, tag++);
      add(rig::Buffer::make(proxies[m][0], RandomWorker::words * 4), m, tag++);
      add(rig::Buffer::make(job.hosts()[m], RandomWorker::words * 4), m, tag++);
    }
  }
  std::vector<std::thread> pool;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        workers[t].run(per_thread);
      } catch (const std::exception& e) {
        ++failures;
        MESSAGE("thread " << t << ": " << std::string(e.what()));
      }
    });
  }
  for (auto& th : pool) th.join();
  REQUIRE(failures == 0);
  for (auto& w : workers) w.check_all();
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE(
    "a submit blocks while its device has more than 64 MiB of work not reached, then resumes") {
  // Every operation of the agent's SIM devices takes 0.4 s: nothing is reached for a while.
  const auto key = rig::test::make_key_file("proxy-64mib");
  Rigd a(key, {}, {"RIG_SIM_LATENCY_US=400000"});
  auto job = rig::test::start_job(key, {&a});
  const rig::Device sim = sims(job, 0)[0];
  constexpr std::size_t chunk = std::size_t{16} << 20;
  std::vector<std::uint8_t> in = pattern(chunk, 5);
  auto src = rig::Buffer::borrow(in.data(), chunk);
  // Buffers first: making one is a round trip that waits for the work sent before it.
  std::vector<rig::Buffer> remote;
  for (int i = 0; i < 5; ++i) remote.push_back(rig::Buffer::make(sim, chunk));
  std::vector<std::uint64_t> values;
  // Four copies of 16 MiB, plus their messages: just over 64 MiB in flight. Each submit returns,
  // since before each the device had at most 48 MiB outstanding.
  for (int i = 0; i < 4; ++i) values.push_back(rig::copy(remote[i], src).value);
  CHECK(sim.reached() < values[0]);
  // The fifth waits for a report.
  std::atomic<bool> returned{false};
  std::uint64_t reached_at_return = 0;
  std::thread fifth([&] {
    rig::copy(remote.back(), src);
    reached_at_return = sim.reached();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const bool returned_early = returned.load();
  const std::uint64_t reached_then = sim.reached();
  fifth.join();
  // It cannot have returned before the first copy was reported reached (unless the device had
  // reached it before the check above, which 0.4 s per copy rules out).
  if (reached_then < values[0]) CHECK_FALSE(returned_early);
  CHECK(reached_at_return >= values[0]);
  std::vector<std::uint8_t> out(chunk);
  rig::copy(rig::Buffer::borrow(out.data(), chunk), remote.back()).wait();
  CHECK(out == in);
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("killing an agent wakes 8 threads waiting on its proxies with Lost and the cause") {
  const auto key = rig::test::make_key_file("proxy-kill");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const auto d = sims(job, 0);
  auto image = rig::load(d[0], rig::test::test_kernels());
  REQUIRE(image.ok());
  // A run that never ends (it spins until a flag that stays 0), so that work behind it waits.
  auto flag = rig::Buffer::make(job.hosts()[0], 4);
  std::uint32_t zero = 0;
  rig::copy(flag, rig::Buffer::borrow(&zero, 4)).wait();
  const rig::Part hold = rig::Run{*image, "hold", rig::Shape::linear(1), {rig::Arg::in(flag)}};
  rig::submit(d[0], hold);
  std::atomic<int> woken{0};
  std::vector<std::string> causes(8);
  std::vector<double> at(8);
  std::vector<std::thread> waiters;
  const auto t_kill = std::make_shared<std::atomic<std::int64_t>>(0);
  for (int t = 0; t < 8; ++t) {
    const rig::Device& dev = d[t % 2];
    const std::uint64_t v = rig::submit(dev, std::span<const rig::Part>{});
    waiters.emplace_back([&, t, dev, v] {
      try {
        dev.wait(v);
        causes[t] = "woke without a loss";
      } catch (const rig::Lost& e) {
        causes[t] = e.what();
      }
      at[t] = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                  .count();
      ++woken;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(woken == 0);
  const pid_t job_process = a.job_pid(1);
  const double killed =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  ::kill(job_process, SIGKILL);
  for (auto& w : waiters) w.join();
  // The controller learns of the death itself, or first from the other agent's abort: either way
  // the cause names the killed agent, and every thread wakes with the job's one cause.
  const auto cause = job.failed();
  REQUIRE(cause.has_value());
  CAPTURE(*cause);
  CHECK((*cause == a.name() + ": closed its connection" ||
         *cause == b.name() + " aborted: " + a.name() + ": closed its connection"));
  for (int t = 0; t < 8; ++t) {
    CAPTURE(t);
    CHECK(causes[t] == *cause);
    CHECK(at[t] - killed < 1.0 * rig::test::sanitizer_slowdown);
  }
  CHECK_THROWS_AS(rig::submit(d[1], std::span<const rig::Part>{}), rig::Lost);
  job.close();
}

namespace {

// What SIGALRM's handler does: an empty submission to a remote host, from inside whatever the
// interrupted thread was doing. Counted by outcome.
std::atomic<int> alarms{0}, alarm_submitted{0}, alarm_refused{0}, alarm_other{0};
std::atomic<std::uint64_t> alarm_last_value{0};
const rig::Device* alarm_device = nullptr;

void on_alarm(int) {
  ++alarms;
  try {
    alarm_last_value = rig::submit(*alarm_device, std::span<const rig::Part>{});
    ++alarm_submitted;
  } catch (const std::invalid_argument&) {
    ++alarm_refused;  // the interrupted submit holds the submission lock in one of its waits
  } catch (...) {
    ++alarm_other;
  }
}

}  // namespace

TEST_CASE("submits from a signal handler that interrupts submits neither deadlock nor corrupt") {
  const auto key = rig::test::make_key_file("proxy-signal");
  Rigd a(key);
  auto job = rig::test::start_job(key, {&a});
  const rig::Device sim = sims(job, 0)[0];
  const rig::Device remote_host = job.hosts()[0];
  constexpr std::size_t n = 64 * 1024;
  const std::vector<std::uint8_t> in = pattern(n, 9);
  std::vector<std::uint8_t> back(n), out(n);
  const auto src = rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n);
  const auto mid = rig::Buffer::borrow(back.data(), n);
  const auto r1 = rig::Buffer::make(sim, n), r2 = rig::Buffer::make(sim, n);
  alarm_device = &remote_host;

  // Nothing here allocates outside rig's calls, where the handler may run: only rig's calls and
  // handles. Each round copies out, back, and out again; the last copy waits, holding the
  // submission lock, for the bytes of the copy back (a wait in which the handler runs).
  {
    const rig::test::ThreadAlarm alarm(on_alarm, 50'000);
    for (int i = 0; i < signal_rounds; ++i) {
      rig::copy(r1, src);
      rig::copy(mid, r1);
      rig::copy(r2, mid);
    }
  }

  rig::copy(rig::Buffer::borrow(out.data(), n), r2).wait();
  CHECK(out == in);
  remote_host.wait(alarm_last_value.load());
  MESSAGE(alarms.load() << " alarms: " << alarm_submitted.load() << " submitted, "
                        << alarm_refused.load() << " refused");
  CHECK(alarms.load() >= (sanitized ? 100 : 1000));
  CHECK(alarm_submitted.load() > 0);
  CHECK(alarm_refused.load() > 0);
  CHECK(alarm_other.load() == 0);
  CHECK(alarm_submitted.load() + alarm_refused.load() == alarms.load());
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("a program loaded on a remote host runs there as host code on the host's memory") {
  const auto key = rig::test::make_key_file("proxy-host-run");
  Rigd a(key), b(key);
  auto job = rig::test::start_job(key, {&a, &b});
  const rig::Device host = job.hosts()[0];
  auto image = rig::load(host, rig::test::test_kernels());
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  constexpr std::uint32_t count = 4096;
  auto there = rig::Buffer::make(host, count * 4);
  const rig::Part fill =
      rig::Run{*image,
               "fill_u32",
               rig::Shape::linear(1),
               {rig::Arg::out(there), rig::Arg::word(count), rig::Arg::word(0xC0FFEE)}};
  rig::submit(host, fill);
  std::vector<std::uint32_t> out(count);
  rig::copy(rig::Buffer::borrow(out.data(), count * 4), there).wait();
  for (std::uint32_t v : out) REQUIRE(v == 0xC0FFEEu);
  // Host memory of one machine is not this process's: only copies reach it.
  CHECK_THROWS_AS(there.access(), std::invalid_argument);
  // Nor does work on one machine reach another's memory: a copy between them is misuse, unless it
  // copies nothing.
  auto other = rig::Buffer::make(job.hosts()[1], count * 4);
  CHECK_THROWS_AS(rig::copy(other, there), std::invalid_argument);
  CHECK_NOTHROW(rig::copy(other, 0, there, 0, 0));
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("a proxy lost here other than by a close fails the job within a second, with its cause") {
  const std::string key_file = rig::test::make_key_file("proxy-lost-here");
  Rigd a(key_file);
  auto job = rig::test::start_job(key_file, {&a});
  const rig::Device sim = sims(job, 0).front();
  const auto t0 = std::chrono::steady_clock::now();
  // What rig::fail does to each device of the process, here to one proxy only.
  sim.core()->lose("lost for the test");
  const auto cause = rig::test::wait_for_failure(job, t0, 5);
  const double detected = rig::test::seconds_since(t0);
  REQUIRE(cause.has_value());
  CHECK(*cause == "lost for the test");
  CHECK(detected < 1.0);
  // Every other host and proxy of the job goes with it; the agent hears the cause.
  CHECK(rig::failure(job.hosts()[0]) == cause);
  CHECK(a.job_end(1).value_or("").find("failed controller aborted: lost for the test") !=
        std::string::npos);
  job.close();
}

TEST_CASE("whoever reads a job failed finds every host and proxy of it lost with that cause") {
  // The loop loses the job's devices one by one: were the job's outcome shown first (as it was), a
  // thread that polls failed() would see the job failed and a device of it not yet lost, with no
  // cause to give. This thread polls as fast as it can while the loop fails the job.
  const std::string key_file = rig::test::make_key_file("proxy-lost-order");
  Rigd a(key_file), b(key_file);
  const int trials = sanitized ? 6 : 20;
  int behind = 0;
  std::string example;
  for (int trial = 0; trial < trials; ++trial) {
    auto job = rig::test::start_job(key_file, {&a, &b});
    std::vector<rig::Device> all = job.hosts();
    for (std::size_t m = 0; m < 2; ++m) {
      const auto d = sims(job, m);
      all.insert(all.end(), d.begin(), d.end());
    }
    const rig::Device lost = sims(job, 0).front();
    std::optional<std::string> cause;
    std::thread reader([&] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!(cause = job.failed()) && rig::test::seconds_since(t0) < 5) {
      }
      if (!cause) return;
      // Devices in reverse: the loop reaches the last member's last device last.
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const auto f = rig::failure(*it);
        if (f == cause) continue;
        ++behind;
        example = it->name() + " read " + f.value_or("(not lost)");
        break;
      }
    });
    lost.core()->lose("lost for the test");
    reader.join();
    REQUIRE(cause.has_value());
    CHECK(*cause == "lost for the test");
    job.close();
  }
  CHECK_MESSAGE(behind == 0, behind << " of " << trials
                                    << " trials found a device behind the job's "
                                    << "failure, as " << example);
}

TEST_CASE("the loss of a device of the controller's own leaves the job alone") {
  const std::string key_file = rig::test::make_key_file("own-device-lost");
  Rigd a(key_file);
  auto job = rig::test::start_job(key_file, {&a});
  const auto own = rig::open(rig::Kind::sim);
  REQUIRE_FALSE(own.empty());
  const rig::Device local = own.front();
  local.core()->lose("the controller's own SIM:0 is gone");
  // Longer than the tick and the one second the spec allows for noticing a loss of the job's own.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CHECK_FALSE(job.failed().has_value());
  const rig::Device host = job.hosts()[0];
  host.wait(rig::submit(host, std::span<const rig::Part>{}));
  const rig::Device sim = sims(job, 0).front();
  const auto bytes = pattern(4096, 7);
  std::vector<std::uint8_t> back(bytes.size());
  const rig::Buffer there = rig::Buffer::make(sim, bytes.size());
  rig::copy(there, 0, rig::Buffer::borrow(const_cast<std::uint8_t*>(bytes.data()), bytes.size()), 0,
            bytes.size());
  rig::copy(rig::Buffer::borrow(back.data(), back.size()), 0, there, 0, back.size()).wait();
  CHECK(back == bytes);
  CHECK_FALSE(job.failed().has_value());
  job.close();
  CHECK(a.job_end(1).value_or("").find("closed") != std::string::npos);
  for (const rig::Device& d : own) rig::close(d);
}

namespace {

// What on_job_alarm sees and counts. It calls Job::failed, which takes the job's outcome lock and
// allocates nothing while the job has not failed.
std::atomic<const rig::remote::Job*> signal_job{nullptr};
std::atomic<long> job_alarms{0};
std::atomic<long> job_alarm_wrong{0};

void on_job_alarm(int) {
  job_alarms.fetch_add(1, std::memory_order_relaxed);
  const rig::remote::Job* job = signal_job.load();
  if (job == nullptr) return;
  try {
    if (job->failed().has_value()) job_alarm_wrong.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    job_alarm_wrong.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

TEST_CASE("a signal handler's job calls that interrupt the job's calls never deadlock") {
  const std::string key_file = rig::test::make_key_file("job-calls-signal");
  const auto key = rig::test::load_key(key_file);
  Rigd a(key_file);
  auto job = rig::test::start_job(key_file, {&a});
  const rig::Device host = job.hosts()[0];
  signal_job = &job;
  // A deadlock would hold this thread for ever: the watchdog makes it a failure instead.
  std::atomic<bool> done{false};
  std::thread watchdog([&done] {
    for (int i = 0; i < 300 && !done.load(); ++i) std::this_thread::sleep_for(100ms);
    if (!done.load()) {
      std::fputs("a job call deadlocked under a signal handler's call\n", stderr);
      std::_Exit(1);
    }
  });
  constexpr int rounds = sanitized ? 50'000 : 200'000;
  int opened = 0;
  int refused = 0;
  {
    const rig::test::ThreadAlarm alarm(on_job_alarm, 20'000);
    for (int i = 0; i < rounds; ++i) {
      (void)job.failed();
      if (i % 256 == 0 && rig::remote::devices(host, "SIM").ok()) ++opened;
      if (i % 4096 == 0) {
        try {
          (void)rig::remote::connect(key, {a.address()});
        } catch (const std::invalid_argument&) {
          ++refused;  // a job is open
        }
      }
    }
    // The handler also runs in close's wait for the agent, and finds the job closing, not failed.
    job.close();
  }
  signal_job = nullptr;
  done = true;
  watchdog.join();
  MESSAGE(job_alarms.load() << " alarms");
  CHECK(job_alarms.load() >= (sanitized ? 100 : 1000));
  CHECK(job_alarm_wrong.load() == 0);
  CHECK(opened == (rounds + 255) / 256);
  CHECK(refused == (rounds + 4095) / 4096);
  CHECK(a.job_end(1).value_or("").find("closed") != std::string::npos);
}
