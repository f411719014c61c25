#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

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

// Times the calling thread gave up its core to sleep (each futex sleep is one).
long sleeps_of_this_thread() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

TEST_CASE("a publish wakes only the sleepers whose value it reaches") {
  // Threads waiting on one device for successive values: each publish below a sleeper's value
  // must leave it asleep, not wake it to find its value unreached and sleep again.
  Timeline t;
  constexpr int sleepers = 4;
  constexpr std::uint64_t below = 200;  // publishes that reach no sleeper's value
  std::atomic<long> woken[sleepers];
  std::vector<std::thread> waiters;
  for (int w = 0; w < sleepers; ++w) {
    waiters.emplace_back([&, w] {
      const long before = sleeps_of_this_thread();
      t.wait(below + 1 + static_cast<std::uint64_t>(w));
      woken[w] = sleeps_of_this_thread() - before;
    });
  }
  std::this_thread::sleep_for(20ms);  // past the spins: every waiter sleeps
  for (std::uint64_t v = 1; v <= below; ++v) {
    t.publish(v);
    std::this_thread::sleep_for(200us);  // time for a woken waiter to go back to sleep
  }
  t.publish(below + sleepers);
  for (auto& w : waiters) w.join();
  for (int w = 0; w < sleepers; ++w) {
    // One sleep, and a few for the test's own start (thread creation, the page faults of a
    // first run); a sleeper woken by every publish sleeps about `below` times.
    CHECK(woken[w].load() < 10);
  }
}

TEST_CASE("more sleepers than a timeline has slots all wake, each at its value") {
  Timeline t;
  constexpr int sleepers = static_cast<int>(rig::detail::timeline_sleeper_slots) * 2 + 3;
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < sleepers; ++w) {
    waiters.emplace_back([&, w] {
      t.wait(static_cast<std::uint64_t>(w) + 1);
      CHECK(t.reached() >= static_cast<std::uint64_t>(w) + 1);
      ++done;
    });
  }
  std::this_thread::sleep_for(30ms);
  for (int w = 0; w < sleepers; ++w) {
    CHECK(done.load() <= w);  // nobody woke before its value
    t.publish(static_cast<std::uint64_t>(w) + 1);
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (done.load() < w + 1 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(100us);
    }
    CHECK(done.load() == w + 1);
  }
  for (auto& w : waiters) w.join();
}

// The CPU the constructing thread runs on, to which pin() confines the threads that call it;
// counts those it could not confine.
struct OneCpu {
  const int cpu = sched_getcpu();
  std::atomic<int> failures{0};
  void pin() {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) ++failures;
  }
};

// A busy loop on the CPU the constructing thread runs on, until stop() or the end of the scope;
// `one.pin()` puts another thread on that CPU beside it, where each yield gives the loop its time
// slice.
struct BusyNeighbour {
  OneCpu one;
  std::atomic<bool> stopped{false};
  std::thread busy{[this] {
    one.pin();
    while (!stopped.load(std::memory_order_relaxed)) {
    }
  }};
  ~BusyNeighbour() { stop(); }
  void stop() {
    stopped = true;
    if (busy.joinable()) busy.join();
  }
};

TEST_CASE("a busy neighbour on the core turns spins off for a while; a quiet core keeps them") {
  using namespace rig::detail;
  BusyNeighbour neighbour;
  OneCpu& one = neighbour.one;
  REQUIRE(one.cpu >= 0);
  bool turned_off = false, allowed_after = true, spun = true;
  unsigned yields = 0, looks_while_off = 0;
  std::thread spinner([&] {
    one.pin();
    // Within a few time slices the late yields make the verdict (late_yields_contended of them).
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (!turned_off && std::chrono::steady_clock::now() < give_up) {
      turned_off = !yield_for_spin();
      ++yields;
    }
    neighbour.stop();
    allowed_after = spins_allowed();
    // While spins are off a spin makes one look, whatever its budget, and a wait sleeps at once.
    spun = spin_for(10'000'000'000ull, [&] {
      ++looks_while_off;
      return false;
    });
  });
  spinner.join();
  MESSAGE(yields << " yields until spins went off");
  REQUIRE(one.failures == 0);
  CHECK(turned_off);
  CHECK_FALSE(allowed_after);
  CHECK_FALSE(spun);
  CHECK(looks_while_off == 1);
  // Once the core is quiet again, spins come back, after spins_off_ns_max at the latest.
  std::this_thread::sleep_for(std::chrono::nanoseconds(spins_off_ns_max) + 100ms);
  CHECK(spins_allowed());
  unsigned looks = 0;
  CHECK(spin_for(1'000'000'000ull, [&] { return ++looks == 100; }));
}

TEST_CASE("spins go off briefly at a first verdict, and for twice as long at each that follows") {
  using namespace rig::detail;
  // A window after any earlier time off, the next verdict is a first one again.
  std::this_thread::sleep_for(std::chrono::nanoseconds(spins_off_ns_max + late_yields_window_ns));
  BusyNeighbour neighbour;
  OneCpu& one = neighbour.one;
  REQUIRE(one.cpu >= 0);
  // How long each of three verdicts in a row turned spins off, the busy loop on the core all along.
  std::vector<std::int64_t> periods;
  std::thread spinner([&] {
    one.pin();
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (periods.size() < 3 && std::chrono::steady_clock::now() < give_up) {
      if (yield_for_spin()) continue;
      periods.push_back(spin_contention.off_period_ns.load());
      while (!spins_allowed()) std::this_thread::sleep_for(1ms);
    }
    neighbour.stop();
  });
  spinner.join();
  REQUIRE(one.failures == 0);
  REQUIRE(periods.size() == 3);
  // A short burst of contention (a process starting beside the job) costs only the shortest.
  CHECK(periods[0] == static_cast<std::int64_t>(spins_off_ns_min));
  CHECK(periods[1] == 2 * periods[0]);
  CHECK(periods[2] == 4 * periods[0]);
}

TEST_CASE("a process confined to one CPU spins on one thread at a time; the others look once") {
  using namespace rig::detail;
  // A spin that holds the CPU's only turn: a second spinner on the same CPU would only take the
  // CPU from the thread both wait for, so it makes one look and goes on (to sleep, in a wait).
  OneCpu one;
  REQUIRE(one.cpu >= 0);
  const auto give_up = std::chrono::steady_clock::now() + 3s;
  while (!spins_allowed() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);  // an earlier test's contended core turned them off
  }
  REQUIRE(spins_allowed());
  std::atomic<bool> spinning{false}, stop{false};
  std::thread first([&] {
    one.pin();
    spin_for(10'000'000'000ull, [&] {
      spinning = true;
      return stop.load();
    });
  });
  while (!spinning) std::this_thread::sleep_for(1ms);
  unsigned looks = 0;
  bool spun = true, allowed = false;
  std::chrono::steady_clock::duration took{};
  std::thread second([&] {
    one.pin();
    const auto start = std::chrono::steady_clock::now();
    spun = spin_for(2'000'000'000ull, [&] {
      ++looks;
      return false;
    });
    took = std::chrono::steady_clock::now() - start;
    allowed = spins_allowed();  // the refusal was the turn's, not a contended core's
  });
  second.join();
  stop = true;
  first.join();
  REQUIRE(one.failures == 0);
  CHECK(allowed);
  CHECK_FALSE(spun);
  CHECK(looks == 1);
  CHECK(took < 500ms);
  // The turn is free again once the first spin has ended.
  unsigned again = 0;
  std::thread third([&] {
    one.pin();
    spun = spin_for(1'000'000'000ull, [&] { return ++again == 100; });
  });
  third.join();
  CHECK(spun);
  CHECK(again == 100);
}
