// Remote devices through real rigd agents on loopback: devices(), buffers, copies of every size
// both ways, program runs, ordering across machines, flow control and loss.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

using rig::test::Rigd;

namespace {

// A job on `agents`, started or the test stops.
rig::remote::Job start(const std::string& key_file, const std::vector<Rigd*>& agents) {
  std::vector<rig::remote::Address> addresses;
  for (Rigd* a : agents) addresses.push_back(a->address());
  auto job = rig::remote::connect(rig::test::load_key(key_file), addresses);
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  return *job;
}

std::vector<rig::Device> sims(const rig::remote::Job& job, std::size_t machine) {
  auto d = rig::remote::devices(job.hosts().at(machine), "SIM");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error()));
  return *d;
}

// Bytes that differ at every position and from one call to the next.
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

}  // namespace

TEST_CASE("devices() gives named proxies with the agent's arch and budget, the same each time") {
  const auto key = rig::test::make_key_file("proxy-devices");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
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
  const auto key = rig::test::make_key_file("proxy-copies");
  Rigd a(key);
  auto job = start(key, {&a});
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
  auto job = start(key, {&a});
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
