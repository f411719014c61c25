// Ordering by memory across devices, and runs of host code on CPU and SIM devices.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"
#include "support/hold.hpp"
#include "support/kernels.hpp"

using namespace std::chrono_literals;

namespace {

rig::Image load(const rig::Device& d) {
  auto image = rig::load(d, rig::test::test_kernels());
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  return *image;
}

rig::Run fill(const rig::Image& image, const rig::Buffer& b, std::uint64_t n, std::uint32_t v) {
  return rig::Run{
      image, "fill_u32", rig::Shape{}, {rig::Arg::out(b), rig::Arg::word(n), rig::Arg::word(v)}};
}

}  // namespace

// Keeps `d` busy until release() is called: a hold kernel spinning on a host flag.
class Hold {
 public:
  Hold(const rig::Device& d, const rig::Image& image) {
    rig::submit(d, rig::Run{image, "hold", {}, {rig::Arg::in(flag_.buffer())}});
  }
  void release() { flag_.release(); }

 private:
  rig::test::HoldFlag flag_;
};

TEST_CASE("a read on one device waits for a write on another, without blocking the caller") {
  const rig::Device slow = rig::sim::open({});
  const rig::Device fast = rig::sim::open({});
  const rig::Image on_slow = load(slow);
  constexpr std::size_t n = 1024;
  const rig::Buffer a = rig::Buffer::make(slow, n * 4);
  const rig::Buffer b = rig::Buffer::make(fast, n * 4);
  std::vector<std::uint32_t> out(n, 0);

  Hold hold(slow, on_slow);
  const std::uint64_t filled = rig::submit(slow, fill(on_slow, a, n, 77));
  const rig::Fence f = rig::copy(b, a);  // runs on `fast`, after the fill: returns while held
  CHECK(f.device == fast);
  const rig::Fence back = rig::copy(rig::Buffer::borrow(out.data(), n * 4), b);
  std::this_thread::sleep_for(5ms);
  CHECK(slow.reached() < filled);
  CHECK_FALSE(f.reached());
  hold.release();
  back.wait();
  CHECK(std::vector<std::uint32_t>(n, 77) == out);
  rig::close(slow);
  rig::close(fast);
}

TEST_CASE("a write waits for earlier reads of the same memory on other devices") {
  // `slow` reads `a` while held; `fast` then overwrites `a`. The read must see the old value, and
  // the write must not run while the read waits.
  const rig::Device slow = rig::sim::open({});
  const rig::Device fast = rig::sim::open({});
  const rig::Image on_slow = load(slow);
  const rig::Image on_fast = load(fast);
  constexpr std::size_t n = 256;
  const rig::Buffer a = rig::Buffer::make(fast, n * 4);
  const rig::Buffer copy_on_slow = rig::Buffer::make(slow, n * 4);
  fast.wait(rig::submit(fast, fill(on_fast, a, n, 1)));
  Hold hold(slow, on_slow);
  const rig::Fence read = rig::copy(copy_on_slow, a);
  CHECK(read.device == slow);
  const std::uint64_t overwrite = rig::submit(fast, fill(on_fast, a, n, 2));
  std::this_thread::sleep_for(5ms);
  CHECK(fast.reached() < overwrite);
  hold.release();
  std::vector<std::uint32_t> seen(n), now(n);
  rig::copy(rig::Buffer::borrow(seen.data(), n * 4), copy_on_slow).wait();
  rig::copy(rig::Buffer::borrow(now.data(), n * 4), a).wait();
  CHECK(seen == std::vector<std::uint32_t>(n, 1));
  CHECK(now == std::vector<std::uint32_t>(n, 2));
  rig::close(slow);
  rig::close(fast);
}

TEST_CASE(
    "runs see their launch shape and arguments; unknown entries and foreign images are misuse") {
  const rig::Device sim = rig::sim::open({});
  const rig::Image image = load(sim);
  CHECK(image.device() == sim);
  const rig::Buffer out = rig::Buffer::make(sim, 7 * 4);
  rig::submit(sim,
              rig::Run{image, "shape", rig::Shape{{2, 3, 4}, {5, 6, 7}}, {rig::Arg::out(out)}});
  std::vector<std::uint32_t> got(7);
  rig::copy(rig::Buffer::borrow(got.data(), 28), out).wait();
  CHECK(got == std::vector<std::uint32_t>{2, 3, 4, 5, 6, 7, 1});

  CHECK_THROWS_WITH_AS(rig::submit(sim, rig::Run{image, "nope", {}, {}}),
                       "rig: part 0: the program has no entry point 'nope'", std::invalid_argument);
  // A buffer argument's errors name it by its position.
  CHECK_THROWS_WITH_AS(
      rig::submit(sim, rig::Run{image, "shape", {}, {rig::Arg::word(1), rig::Arg::out(out, 29)}}),
      "rig: part 0: argument 1: offset 29 is past the end of its buffer of 28 bytes",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      rig::submit(sim, rig::Run{image, "shape", {}, {rig::Arg::out(rig::Buffer())}}),
      "rig: part 0: the argument 0 buffer is empty", std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      rig::submit(rig::host(), rig::Run{image, "shape", {}, {}}),
      ("rig: part 0: the image was loaded on " + sim.name() + ", not on CPU").c_str(),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      rig::submit(sim, rig::Run{image, "shape", rig::Shape{{0, 1, 1}, {1, 1, 1}}, {}}),
      "rig: part 0: the launch shape of 'shape' has a zero dimension", std::invalid_argument);
  rig::close(sim);
}

TEST_CASE("a submission's parts run in order, and one value covers them all") {
  const rig::Device sim = rig::sim::open({.latency_min_ns = 100'000, .latency_max_ns = 300'000});
  const rig::Image image = load(sim);
  constexpr std::size_t n = 100;
  const rig::Buffer a = rig::Buffer::make(sim, n * 4);
  std::vector<std::uint32_t> out(n);
  const rig::Buffer h = rig::Buffer::borrow(out.data(), n * 4);
  const std::vector<rig::Part> parts = {fill(image, a, n, 5), rig::Copy{h, 0, a, 0, n * 4},
                                        fill(image, a, n, 6)};
  const std::uint64_t v = rig::submit(sim, parts);
  sim.wait(v);
  CHECK(out == std::vector<std::uint32_t>(n, 5));
  rig::close(sim);
}

TEST_CASE("the same program runs on the host device") {
  const rig::Image image = load(rig::host());
  constexpr std::size_t n = 1000;
  const rig::Buffer a = rig::Buffer::make(rig::host(), n * 4);
  const rig::Buffer b = rig::Buffer::make(rig::host(), n * 4);
  rig::submit(rig::host(), fill(image, a, n, 10));
  rig::submit(rig::host(), fill(image, b, n, 3));
  rig::submit(rig::host(), rig::Run{image,
                                    "mix_u32",
                                    {},
                                    {rig::Arg::inout(a), rig::Arg::in(b), rig::Arg::word(n),
                                     rig::Arg::word(4)}});
  const auto bytes = a.access();
  const auto* words = reinterpret_cast<const std::uint32_t*>(bytes.data());
  for (std::size_t i = 0; i < n; ++i) REQUIRE(words[i] == 10u * 3u + 3u + 4u);
}
