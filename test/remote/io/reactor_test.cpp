#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "remote/io/liveness.hpp"
#include "remote/io/reactor.hpp"

using namespace rig::remote;

namespace {

struct Count final : Command {
  std::atomic<int>* counter = nullptr;
  int stop_at = 0;
  void run(Reactor& r) noexcept override {
    if (counter->fetch_add(1) + 1 == stop_at) r.stop();
  }
};

}  // namespace

TEST_CASE("commands posted from many threads all run on the loop thread") {
  ManualClock clock;
  Reactor reactor(clock, 100);
  constexpr int threads = 4, each = 2000;
  std::atomic<int> counter{0};
  std::vector<Count> commands(threads * each);
  for (auto& c : commands) {
    c.counter = &counter;
    c.stop_at = threads * each;
  }
  std::vector<std::thread> posters;
  for (int t = 0; t < threads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) reactor.post(&commands[t * each + i]);
    });
  }
  reactor.run();  // returns once the last command stops it
  for (auto& p : posters) p.join();
  CHECK(counter.load() == threads * each);
}

TEST_CASE("tickers see the injected clock's time; one may remove itself") {
  ManualClock clock(5000);
  Reactor reactor(clock, 1000);
  std::vector<std::int64_t> seen;
  std::uint64_t self = 0;
  self = reactor.add_ticker([&](std::int64_t now) {
    seen.push_back(now);
    if (seen.size() == 2) reactor.remove_ticker(self);
  });
  reactor.tick_now();
  clock.advance(10'000);
  reactor.tick_now();
  reactor.tick_now();
  CHECK(seen == std::vector<std::int64_t>{5000, 15000});
}

TEST_CASE("liveness: heartbeats, silence and stalled sends, on a manual clock") {
  const Timing t{};
  std::int64_t now = 0;
  Liveness l(t, now);
  CHECK(l.check(now) == Liveness::Verdict::fine);
  now += t.heartbeat_idle_ms - 1;
  CHECK(l.check(now) == Liveness::Verdict::fine);
  now += 1;
  CHECK(l.check(now) == Liveness::Verdict::send_heartbeat);
  l.sent(now);
  CHECK(l.check(now) == Liveness::Verdict::fine);

  // Silence: fails at exactly 10 s without a byte, not a millisecond before.
  Liveness quiet(t, 0);
  for (std::int64_t ms = 0; ms < 10'000; ms += 700) {
    quiet.sent(ms);
    CHECK(quiet.check(ms) != Liveness::Verdict::silent);
  }
  CHECK(quiet.check(9'999) != Liveness::Verdict::silent);
  CHECK(quiet.check(10'000) == Liveness::Verdict::silent);
  quiet.received(10'000);
  CHECK(quiet.check(10'000) != Liveness::Verdict::silent);

  // A backlog that moves is fine however long it lasts; one that stops moving for 10 s fails.
  Liveness sending(t, 0);
  sending.backlog(0);
  for (std::int64_t ms = 0; ms <= 30'000; ms += 5'000) {
    sending.received(ms);
    sending.progress(ms, true);
    CHECK(sending.check(ms) == Liveness::Verdict::fine);
  }
  CHECK(sending.check(30'000 + 9'999) != Liveness::Verdict::stalled);
  sending.received(39'000);
  CHECK(sending.check(40'000) == Liveness::Verdict::stalled);
  sending.progress(40'000, false);
  sending.sent(40'000);
  CHECK(sending.check(40'000) == Liveness::Verdict::fine);
}

TEST_CASE("scaled timing keeps every time positive") {
  const Timing fast = Timing{}.scaled_down(100'000);
  CHECK(fast.silence_timeout_ms == 1);
  CHECK(fast.tick_ms == 1);
  const Timing ten = Timing{}.scaled_down(10);
  CHECK(ten.silence_timeout_ms == 1000);
}

TEST_CASE("run(wait): the loop sleeps only through the caller's wait, and a post ends the sleep") {
  ManualClock clock;
  Reactor reactor(clock, 50);
  std::atomic<int> counter{0};
  Count stop;
  stop.counter = &counter;
  stop.stop_at = 1;
  int waits = 0;
  bool posted = false;
  reactor.run([&](int fd, int timeout_ms) {
    ++waits;
    CHECK(fd >= 0);
    CHECK(timeout_ms > 0);  // the tick's timer bounds every sleep
    CHECK(timeout_ms <= 50);
    if (!posted) {
      posted = true;
      // From another thread while the loop sleeps: the wait must see the loop's descriptor wake.
      std::thread([&] { reactor.post(&stop); }).join();
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
  });
  CHECK(counter.load() == 1);
  CHECK(waits >= 1);
}

namespace {

// A chain of soon() calls, each queuing the next, as a rail's chunks go when the kernel takes
// each one at once; the last stops the loop.
struct Chain {
  Reactor* reactor = nullptr;
  uv_poll_t* poll = nullptr;
  int links = 0;
  int done = 0;
  int served_at = -1;  // links done when the ready socket was served
  void next() {
    if (++done < links) return reactor->soon([this] { next(); });
    uv_close(reinterpret_cast<uv_handle_t*>(poll), nullptr);
    reactor->stop();
  }
};

struct Start final : Command {
  Chain* chain = nullptr;
  void run(Reactor&) noexcept override { chain->next(); }
};

}  // namespace

TEST_CASE(
    "soon(): what it queues runs on a later turn, and the loop serves a ready socket between") {
  ManualClock clock;
  Reactor reactor(clock, 50);
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  REQUIRE(::write(fds[1], "x", 1) == 1);  // readable before the chain starts
  uv_poll_t poll{};
  Chain chain{&reactor, &poll, 1000};
  REQUIRE(uv_poll_init(reactor.loop(), &poll, fds[0]) == 0);
  poll.data = &chain;
  uv_poll_start(&poll, UV_READABLE, [](uv_poll_t* h, int, int) {
    auto* c = static_cast<Chain*>(h->data);
    if (c->served_at < 0) c->served_at = c->done;
    uv_poll_stop(h);
  });
  Start start;
  start.chain = &chain;
  reactor.post(&start);
  reactor.run();
  CHECK(chain.done == 1000);
  // Served within a turn or two of the chain's start, not after its 1000 links, as a loop that
  // ran each next link at once would.
  CHECK(chain.served_at >= 0);
  CHECK(chain.served_at <= 2);
  ::close(fds[0]);
  ::close(fds[1]);

  // Driven by hand: each run_soon() runs what was queued before it, not what that queues.
  Reactor by_hand(clock, 50);
  int ran = 0;
  by_hand.soon([&] {
    ++ran;
    by_hand.soon([&] { ++ran; });
  });
  CHECK(by_hand.run_soon());
  CHECK(ran == 1);
  CHECK(by_hand.run_soon());
  CHECK(ran == 2);
  CHECK_FALSE(by_hand.run_soon());
}

namespace {

struct Flag final : Command {
  std::atomic<int> runs{0};
  bool stop = false;
  void run(Reactor& r) noexcept override {
    runs.fetch_add(1, std::memory_order_release);
    if (stop) r.stop();
  }
};

}  // namespace

TEST_CASE("post() while the loop polls leaves out the wake-up, and no post is ever missed") {
  // Posts spaced from 0 to 250 us apart straddle the end of the loop's 100 us poll after each
  // command: a post that skipped the wake-up as the poll ended would wait forever.
  ManualClock clock;
  Reactor reactor(clock, 50);
  std::thread loop([&] { reactor.run(); });
  Flag flag;
  int missed = 0;
  constexpr int posts = 3000;
  for (int i = 0; i < posts && missed == 0; ++i) {
    reactor.post(&flag);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (flag.runs.load(std::memory_order_acquire) != i + 1) {
      if (std::chrono::steady_clock::now() >= until) {
        missed = i + 1;
        break;
      }
      std::this_thread::yield();
    }
    const auto gap = std::chrono::microseconds((i * 37) % 251);
    const auto resume = std::chrono::steady_clock::now() + gap;
    while (std::chrono::steady_clock::now() < resume) {
    }
  }
  CHECK_MESSAGE(missed == 0, "post ", missed, " did not run within 2 s");
  Flag stop;
  stop.stop = true;
  reactor.post(&stop);
  loop.join();
  if (missed == 0) CHECK(flag.runs.load() == posts);
}

namespace {

// A command that queues work for the end of the loop's turn, counting the commands run first.
struct Queues final : Command {
  int* commands_run = nullptr;
  std::vector<int>* seen = nullptr;
  bool stop = false;
  void run(Reactor& r) noexcept override {
    ++*commands_run;
    r.at_turn_end([this, &r] {
      seen->push_back(*commands_run);
      if (stop) r.stop();
    });
  }
};

}  // namespace

TEST_CASE("at_turn_end(): work a batch of commands queued runs once the whole batch has run") {
  ManualClock clock;
  Reactor reactor(clock, 50);
  int commands_run = 0;
  std::vector<int> seen;
  std::vector<Queues> batch(3);
  for (auto& q : batch) {
    q.commands_run = &commands_run;
    q.seen = &seen;
  }
  batch.back().stop = true;
  // Posted before the loop runs: one wake-up drains all three, then the turn ends.
  for (auto& q : batch) reactor.post(&q);
  reactor.run();
  CHECK(seen == std::vector<int>{3, 3, 3});
}
