// The count table (src/remote/job/rail_count.*): words taken zeroed and given back, the table's
// size, counts that only grow, waiters that return at once or sleep until a publish or a raise,
// and a child of fork that sees every word raised. Waits here have deadlines, never sleeps.
#include "remote/job/rail_count.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "remote/limits.hpp"

using rig::remote::rail_count_raised;
using rig::remote::RailCounts;
using rig::remote::RailWord;

namespace {

// Whether `word` has a sleeper within `ms`: the waiter has gone past its spin into the futex (or
// is about to), so the wake-up is what the test proves, not the spin.
bool sleeping(const RailWord& word, int ms = 10'000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (word.sleepers.load() == 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("rail counts: taken zeroed, given back, and taken again zeroed") {
    std::uint32_t slot = 0;
    {
      auto c = RailCounts::take();
      REQUIRE(c.has_value());
      CHECK(c->sent().get() == 0);
      CHECK(c->arrived().get() == 0);
      CHECK(&c->sent() != &c->arrived());
      c->sent().publish(5);
      c->arrived().publish(rail_count_raised);
      slot = c->slot();
    }
    // The lowest free pair is taken first: the one just given back, its words zeroed again.
    auto again = RailCounts::take();
    REQUIRE(again.has_value());
    CHECK(again->slot() == slot);
    CHECK(again->sent().get() == 0);
    CHECK(again->arrived().get() == 0);
    // A moved-from handle gives nothing back: the pair stays taken by the new one.
    RailCounts moved(std::move(*again));
    again.reset();
    auto other = RailCounts::take();
    REQUIRE(other.has_value());
    CHECK(other->slot() != moved.slot());
  }

  TEST_CASE("rail counts: exactly rails_max rails can be held; the next take gives nothing") {
    std::vector<std::unique_ptr<RailCounts>> held;
    while (auto c = RailCounts::take()) {
      held.push_back(std::make_unique<RailCounts>(std::move(*c)));
      REQUIRE(held.size() <= rig::remote::rails_max);
    }
    CHECK(held.size() == rig::remote::rails_max);
    CHECK_FALSE(RailCounts::take().has_value());
    // Each pair once, and within the table (other per-rail tables index by slot).
    std::vector<bool> seen(rig::remote::rails_max, false);
    for (const auto& c : held) {
      REQUIRE(c->slot() < rig::remote::rails_max);
      CHECK_FALSE(seen[c->slot()]);
      seen[c->slot()] = true;
    }
    // One given back: one more, that one.
    const std::uint32_t freed = held[1234]->slot();
    held.erase(held.begin() + 1234);
    auto c = RailCounts::take();
    REQUIRE(c.has_value());
    CHECK(c->slot() == freed);
    CHECK_FALSE(RailCounts::take().has_value());
  }

  TEST_CASE("rail counts: publish only grows; a reached value's wait returns at once") {
    auto c = RailCounts::take();
    REQUIRE(c.has_value());
    RailWord& w = c->sent();
    w.publish(5);
    w.publish(3);
    CHECK(w.get() == 5);
    w.publish(5);
    CHECK(w.get() == 5);
    CHECK(w.wait(0) == 5);
    CHECK(w.wait(3) == 5);
    CHECK(w.wait(5) == 5);
    CHECK(c->arrived().get() == 0);  // the other word untouched
    c->raise();
    CHECK(w.get() == rail_count_raised);
    CHECK(c->arrived().get() == rail_count_raised);
    w.publish(7);  // nothing lowers a raised word
    CHECK(w.get() == rail_count_raised);
    // A raised word has reached every value.
    CHECK(w.wait(UINT64_MAX - 1) == rail_count_raised);
    CHECK(w.wait(rail_count_raised) == rail_count_raised);
  }

  TEST_CASE("rail counts: a sleeping waiter wakes on the publish that reaches its value") {
    auto c = RailCounts::take();
    REQUIRE(c.has_value());
    RailWord& w = c->arrived();
    std::atomic<std::uint64_t> got{0};
    std::thread waiter([&] { got = w.wait(10); });
    REQUIRE(sleeping(w));
    w.publish(9);  // wakes it, but 9 is short of 10: it sleeps again
    CHECK(got.load() == 0);
    w.publish(12);
    waiter.join();
    CHECK(got.load() == 12);
    CHECK(w.sleepers.load() == 0);
  }

  TEST_CASE("rail counts: every sleeper on both words wakes on raise") {
    auto c = RailCounts::take();
    REQUIRE(c.has_value());
    std::atomic<int> woke{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i) {
      RailWord& w = i % 2 == 0 ? c->sent() : c->arrived();
      waiters.emplace_back([&w, &woke] {
        if (w.wait(1000) == rail_count_raised) ++woke;
      });
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((c->sent().sleepers.load() < 2 || c->arrived().sleepers.load() < 2) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    CHECK(c->sent().sleepers.load() == 2);
    CHECK(c->arrived().sleepers.load() == 2);
    c->raise();
    for (auto& t : waiters) t.join();
    CHECK(woke.load() == 4);
  }

  TEST_CASE("rail counts: whoever sees a round arrived sees it sent") {
    // A round's sources were read before its bytes left, so a thread that has waited for an
    // arrival may write its sources again and read sent() as at least that round. The loop moves
    // both words; the reader here reads them in the other order, as a user does after
    // wait_arrived. Published arrived-first, the reader saw sent behind in every run on the VM.
    auto c = RailCounts::take();
    REQUIRE(c);
    constexpr std::uint64_t rounds = 200'000;
    std::atomic<bool> done{false};
    std::uint64_t behind = 0;
    std::uint64_t looks = 0;
    std::thread reader([&] {
      while (!done.load(std::memory_order_acquire)) {
        const std::uint64_t arrived = c->arrived().get();
        if (c->sent().get() < arrived) ++behind;
        ++looks;
      }
    });
    for (std::uint64_t r = 1; r <= rounds; ++r) c->arrive(r);
    done.store(true, std::memory_order_release);
    reader.join();
    CAPTURE(looks);
    CHECK(behind == 0);
    CHECK(c->sent().get() == rounds);
    CHECK(c->arrived().get() == rounds);
  }

  TEST_CASE("rail counts: a child of fork sees every word raised; the parent's stay") {
    auto a = RailCounts::take();
    auto b = RailCounts::take();
    REQUIRE(a.has_value());
    REQUIRE(b.has_value());
    a->sent().publish(3);
    a->arrived().publish(2);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      alarm(10);  // a wait that never returns fails the test instead of holding it
      int wrong = 0;
      for (const RailWord* w : {&a->sent(), &a->arrived(), &b->sent(), &b->arrived()}) {
        if (w->get() != rail_count_raised) ++wrong;
        if (w->wait(1'000'000) != rail_count_raised) ++wrong;
      }
      if (wrong != 0) std::fprintf(stderr, "in the child of fork: %d words not raised\n", wrong);
      _exit(wrong);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(a->sent().get() == 3);
    CHECK(a->arrived().get() == 2);
    CHECK(b->sent().get() == 0);
  }
}
