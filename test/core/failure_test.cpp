// rig::fail and device loss. rig::fail is final for the process, so these tests have a process of
// their own and run in file order: single-device loss first, then the process-wide failure.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"
#include "support/hold.hpp"
#include "support/kernels.hpp"

using namespace std::chrono_literals;

namespace {

rig::Image load(const rig::Device& d) {
  auto image = rig::load(d, rig::test::test_kernels());
  REQUIRE(image.ok());
  return *image;
}

}  // namespace

TEST_CASE("a lost device fails the work that depends on it, and only that work") {
  const rig::Device a = rig::sim::open({});
  const rig::Device b = rig::sim::open({});
  const rig::Device c = rig::sim::open({});
  const rig::Image on_a = load(a);
  rig::test::HoldFlag flag;
  const rig::Buffer on_a_mem = rig::Buffer::make(a, 64);
  rig::submit(a, rig::Run{on_a, "hold", {}, {rig::Arg::in(flag.buffer())}});
  rig::submit(
      a,
      rig::Run{
          on_a, "fill_u32", {}, {rig::Arg::out(on_a_mem), rig::Arg::word(16), rig::Arg::word(1)}});
  const rig::Buffer on_b_mem = rig::Buffer::make(b, 64);
  const rig::Fence dependent = rig::copy(on_b_mem, on_a_mem);  // on b, after a's fill
  CHECK(dependent.device == b);

  a.core()->lose("SIM:a: the simulated device fell off the bus");
  CHECK_THROWS_WITH_AS(dependent.wait(), "SIM:a: the simulated device fell off the bus", rig::Lost);
  CHECK(rig::failure(b) == "SIM:a: the simulated device fell off the bus");
  CHECK(rig::failure(a) == "SIM:a: the simulated device fell off the bus");
  CHECK_THROWS_WITH_AS(rig::Buffer::make(a, 1), "SIM:a: the simulated device fell off the bus",
                       rig::Lost);
  // An unrelated device goes on.
  CHECK_FALSE(rig::failure(c).has_value());
  std::vector<std::uint8_t> in(32, 3), out(32, 0);
  const rig::Buffer on_c = rig::Buffer::make(c, 32);
  rig::copy(on_c, rig::Buffer::borrow(in.data(), 32));
  rig::copy(rig::Buffer::borrow(out.data(), 32), on_c).wait();
  CHECK(out == in);
  CHECK_FALSE(rig::process_failure().has_value());
  rig::close(a);  // a lost device closes without waiting
  rig::close(b);
  rig::close(c);
}

TEST_CASE("after rig::fail, waiters on three threads wake with Lost and the reason") {
  std::vector<rig::Device> sims;
  for (int i = 0; i < 3; ++i) sims.push_back(rig::sim::open({}));
  rig::test::HoldFlag flag;
  std::vector<std::uint64_t> pending;
  for (const auto& d : sims) {
    const rig::Image image = load(d);
    pending.push_back(rig::submit(d, rig::Run{image, "hold", {}, {rig::Arg::in(flag.buffer())}}));
  }
  std::atomic<int> ready{0};
  std::vector<std::string> caught(3);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      ++ready;
      try {
        sims[i].wait(pending[i]);
        caught[i] = "returned";
      } catch (const rig::Lost& e) {
        caught[i] = e.what();
      }
    });
  }
  while (ready.load() < 3) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);  // the waiters are asleep by now
  for (const auto& c : caught) CHECK(c.empty());

  rig::fail("operator pulled the plug");
  for (auto& w : waiters) w.join();
  for (const auto& c : caught) CHECK(c == "operator pulled the plug");

  // Every later use raises Lost with the reason; the first cause wins.
  rig::fail("a later cause");
  CHECK(rig::process_failure() == "operator pulled the plug");
  CHECK(rig::failure(sims[0]) == "operator pulled the plug");
  CHECK(rig::failure(rig::host()) == "operator pulled the plug");
  CHECK_THROWS_WITH_AS(sims[1].reached(), "operator pulled the plug", rig::Lost);
  CHECK_THROWS_WITH_AS(rig::Buffer::make(sims[2], 8), "operator pulled the plug", rig::Lost);
  CHECK_THROWS_WITH_AS(rig::Buffer::make(rig::host(), 8), "operator pulled the plug", rig::Lost);
  CHECK_THROWS_WITH_AS(rig::open(rig::Kind::sim), "operator pulled the plug", rig::Lost);
  CHECK_THROWS_WITH_AS(rig::sim::open({}), "operator pulled the plug", rig::Lost);
  std::uint8_t byte = 0;
  CHECK_THROWS_WITH_AS(rig::Buffer::borrow(&byte, 1), "operator pulled the plug", rig::Lost);
}
