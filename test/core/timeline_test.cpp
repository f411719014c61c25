#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/spin.hpp"
#include "core/timeline.hpp"
#include "rig/rig.hpp"

using rig::detail::Timeline;
using namespace std::chrono_literals;

TEST_CASE("a timeline only grows") {
  Timeline t;
  CHECK(t.reached() == 0);
  t.publish(5);
  t.publish(3);
  CHECK(t.reached() == 5);
  t.wait(5);
  t.wait(1);
}

TEST_CASE("a waiter sleeping on a timeline wakes when the value is published") {
  Timeline t;
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    t.wait(7);
    woke = true;
  });
  std::this_thread::sleep_for(20ms);  // past the spin: the waiter sleeps on the futex
  CHECK_FALSE(woke.load());
  t.publish(6);
  std::this_thread::sleep_for(5ms);
  CHECK_FALSE(woke.load());
  t.publish(7);
  waiter.join();
  CHECK(woke.load());
}

TEST_CASE("losing a timeline wakes every waiter with the cause, and the first cause wins") {
  Timeline t;
  std::vector<std::thread> waiters;
  std::atomic<int> lost{0};
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      try {
        t.wait(100);
      } catch (const rig::Lost& e) {
        if (std::string(e.what()) == "disk on fire") ++lost;
      }
    });
  }
  std::this_thread::sleep_for(20ms);
  CHECK(t.lose("disk on fire"));
  CHECK_FALSE(t.lose("second cause"));
  for (auto& w : waiters) w.join();
  CHECK(lost.load() == 4);
  CHECK(t.why() == "disk on fire");
  CHECK_THROWS_WITH_AS(t.wait(0), "disk on fire", rig::Lost);
}

TEST_CASE("many publishers and waiters never miss a wake-up") {
  Timeline t;
  constexpr std::uint64_t last = 20000;
  std::vector<std::thread> waiters;
  for (int w = 0; w < 3; ++w) {
    waiters.emplace_back([&, w] {
      for (std::uint64_t v = 1 + w; v <= last; v += 97) t.wait(v);
      t.wait(last);
    });
  }
  for (std::uint64_t v = 1; v <= last; ++v) t.publish(v);
  for (auto& w : waiters) w.join();
  CHECK(t.reached() == last);
}

TEST_CASE(
    "on one CPU a wait yields at every look, and a waiter and its publisher there still meet") {
  // Both threads confined to the CPU this test starts on: the publisher runs only while the
  // waiter gives the core up, whether it spins or sleeps (core/spin.hpp, looks_per_yield).
  const int cpu = sched_getcpu();
  REQUIRE(cpu >= 0);
  const auto pin = [cpu] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0);
  };
  Timeline ping, pong;
  constexpr std::uint64_t rounds = 20'000;
  unsigned waiter_looks = 0;
  std::thread waiter([&] {
    pin();
    waiter_looks = rig::detail::looks_per_yield();
    for (std::uint64_t r = 1; r <= rounds; ++r) {
      ping.wait(r);
      pong.publish(r);
    }
  });
  std::thread publisher([&] {
    pin();
    for (std::uint64_t r = 1; r <= rounds; ++r) {
      ping.publish(r);
      pong.wait(r);
    }
  });
  waiter.join();
  publisher.join();
  CHECK(waiter_looks == 1);
  CHECK(pong.reached() == rounds);
  // A thread that may run on several CPUs keeps the spin's looks between yields.
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  if (CPU_COUNT(&all) > 1) {
    unsigned looks = 0;
    std::thread([&] { looks = rig::detail::looks_per_yield(); }).join();
    CHECK(looks == rig::detail::spin_looks_per_yield);
  }
}
