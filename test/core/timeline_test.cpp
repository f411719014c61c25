#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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
