#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "rig/rig.hpp"
#include "rig/sim.hpp"

TEST_CASE("the host device") {
  const rig::Device h = rig::host();
  CHECK(h.kind() == rig::Kind::cpu);
  CHECK(h.name() == "CPU");
  CHECK(h.arch().rfind("x86_64", 0) == 0);
  CHECK(h.budget() > (std::uint64_t{1} << 28));
  CHECK(rig::host() == h);
  CHECK(rig::open(rig::Kind::cpu) == std::vector<rig::Device>{h});
  CHECK(rig::reaches(h, h));
  CHECK_THROWS_WITH_AS(rig::close(h), "rig: the host device cannot be closed",
                       std::invalid_argument);
}

TEST_CASE("SIM devices: names, arch, budget, reach, and the same devices on every open") {
  const auto sims = rig::open(rig::Kind::sim);
  REQUIRE(sims.size() == 2);
  CHECK(sims[0].name().rfind("SIM:", 0) == 0);
  CHECK(sims[0].arch() == "sim");
  CHECK(sims[0].kind() == rig::Kind::sim);
  CHECK(rig::open(rig::Kind::sim) == sims);
  CHECK(rig::reaches(sims[0], rig::host()));
  CHECK_FALSE(rig::reaches(rig::host(), sims[0]));
  CHECK(rig::reaches(sims[0], sims[1]));
}

TEST_CASE("kind names") {
  CHECK(rig::kind_name(rig::Kind::cuda) == "CUDA");
  CHECK(rig::kind_from_name("SIM") == rig::Kind::sim);
  CHECK_FALSE(rig::kind_from_name("TPU").has_value());
}

TEST_CASE("a copy to a SIM device and back moves every byte") {
  const rig::Device sim = rig::sim::open({});
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
    std::vector<std::uint8_t> in(n), out(n, 0);
    std::iota(in.begin(), in.end(), static_cast<std::uint8_t>(n));
    const rig::Buffer dev = rig::Buffer::make(sim, n);
    const rig::Buffer src = rig::Buffer::borrow(in.data(), n);
    const rig::Buffer dst = rig::Buffer::borrow(out.data(), n);
    rig::copy(dev, src);
    const rig::Fence back = rig::copy(dst, dev);
    CHECK(back.device == sim);
    back.wait();
    CHECK(back.reached());
    CHECK(out == in);
  }
  rig::close(sim);
}

TEST_CASE("budgets: OutOfMemory beyond it, memory returns when a buffer goes") {
  const rig::Device sim = rig::sim::open({.budget_bytes = 1000});
  CHECK(sim.budget() == 1000);
  {
    const rig::Buffer a = rig::Buffer::make(sim, 600);
    CHECK_THROWS_WITH_AS(
        rig::Buffer::make(sim, 500),
        (sim.name() + ": out of memory: 500 bytes asked for, 400 of 1000 free").c_str(),
        rig::OutOfMemory);
  }
  const rig::Buffer b = rig::Buffer::make(sim, 1000);
  CHECK(b.size() == 1000);
  rig::close(sim);
}

TEST_CASE("host access waits for the device work that uses the buffer") {
  const rig::Device sim =
      rig::sim::open({.latency_min_ns = 2'000'000, .latency_max_ns = 2'000'000});
  std::vector<std::uint32_t> pattern(1024, 0xabcd1234u);
  const rig::Buffer src = rig::Buffer::borrow(pattern.data(), 4096);
  const rig::Buffer dev = rig::Buffer::make(sim, 4096);
  const rig::Buffer out = rig::Buffer::make(rig::host(), 4096);
  rig::copy(dev, src);
  const rig::Fence f = rig::copy(out, dev);
  CHECK_FALSE(f.reached());  // 2 ms per copy: cannot be done yet
  const auto bytes = out.access();
  CHECK(f.reached());
  CHECK(std::memcmp(bytes.data(), pattern.data(), 4096) == 0);
  CHECK_THROWS_WITH_AS(dev.access(),
                       ("rig: Buffer::access on a buffer of " + sim.name() +
                        ": only host buffers can be accessed directly; copy it to one")
                           .c_str(),
                       std::invalid_argument);
  rig::close(sim);
}

TEST_CASE("close waits for the work, frees memory, and makes the device's buffers unusable") {
  const rig::Device sim =
      rig::sim::open({.latency_min_ns = 1'000'000, .latency_max_ns = 1'000'000});
  std::vector<std::uint8_t> in(256, 9), out(256, 0);
  const rig::Buffer dev = rig::Buffer::make(sim, 256);
  rig::copy(dev, rig::Buffer::borrow(in.data(), 256));
  rig::copy(rig::Buffer::borrow(out.data(), 256), dev);
  rig::close(sim);
  CHECK(out == in);  // the work submitted before close ran to the end
  CHECK_THROWS_WITH_AS(rig::Buffer::make(sim, 1), (sim.name() + " is closed").c_str(),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(rig::copy(rig::Buffer::borrow(out.data(), 256), dev),
                       (sim.name() + " is closed").c_str(), std::invalid_argument);
  rig::close(sim);  // twice is nothing
}

TEST_CASE("misuse is invalid_argument with a message that says what was wrong") {
  const rig::Device sim = rig::sim::open({});
  const rig::Buffer dev = rig::Buffer::make(sim, 64);
  std::vector<std::uint8_t> host(64);
  const rig::Buffer h = rig::Buffer::borrow(host.data(), 64);
  CHECK_THROWS_WITH_AS(rig::copy(dev, 60, h, 0, 8),
                       ("rig: part 0: destination range [60, 60+8) is outside its buffer of 64 "
                        "bytes on " +
                        sim.name())
                           .c_str(),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      rig::submit(rig::host(), rig::Copy{h, 0, dev, 0, 8}),
      ("rig: part 0: CPU does not reach the source buffer on " + sim.name()).c_str(),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(rig::Buffer::borrow(nullptr, 5),
                       "rig: Buffer::borrow of 5 bytes at a null pointer", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sim.wait(sim.reached() + 1000),
                       doctest::Contains("beyond the last submitted"), std::invalid_argument);
  CHECK_THROWS_AS(rig::Device().name(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(rig::sim::open({.latency_min_ns = 5, .latency_max_ns = 1}),
                       "rig: SIM latency_min_ns 5 is above latency_max_ns 1",
                       std::invalid_argument);
  // A copy of no bytes is done at once.
  const rig::Fence none = rig::copy(dev, 0, h, 0, 0);
  CHECK(none.reached());
  rig::close(sim);
}
