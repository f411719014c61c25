// The read lane (remote/io/read_lane.hpp) on a real socket pair: lent only for the key asked,
// a reader's bytes kept across readers, frames passed on to the loop and bytes given back in the
// order they came, and a reader asleep on the socket woken when the loop wants the lane back or
// closes it. The connection's and the rails' use of it run in the rails' tests against real
// agents (test/remote/rail_test.cpp).
#include "remote/io/read_lane.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "remote/io/clock.hpp"

using namespace rig::remote;

namespace {

// A reader blocked in poll() gives the lane up within this of the loop's call (generous: a loaded
// machine, a sanitizer's build).
constexpr auto woken_within = std::chrono::seconds(5);

struct Pair {
  Pair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
    // Never dereferenced by the lane: it only tells whether a connection is there.
    static int marker = 0;
    lane = ReadLane::open(fds[0], reactor, nullptr, reinterpret_cast<Connection*>(&marker));
    REQUIRE(lane != nullptr);
    lane->on_request([this](std::uint64_t key) { requested = key; });
    lane->on_back([this] { ++backs; });
  }
  ~Pair() {
    lane->close();
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void peer_writes(const std::string& s) const {
    REQUIRE(::write(fds[1], s.data(), s.size()) == static_cast<ssize_t>(s.size()));
  }
  // What the lane's reader holds, as text.
  std::string held() const { return {reinterpret_cast<const char*>(lane->data()), lane->size()}; }
  // Runs the loop's posted work (requests, lanes given back).
  void run_posts() { uv_run(reactor.loop(), UV_RUN_NOWAIT); }

  ManualClock clock;
  Reactor reactor{clock, 100};
  int fds[2] = {-1, -1};
  std::shared_ptr<ReadLane> lane;
  std::uint64_t requested = 0;
  int backs = 0;
};

std::string text(const Bytes& b) {
  return {b.begin(), b.end()};
}

}  // namespace

TEST_CASE("read lane: lent for the key asked only; what a reader leaves goes back in order") {
  Pair p;
  CHECK(p.lane->claim(7) == nullptr);  // the loop's until lent
  p.lane->request(7);
  p.lane->request(7);  // one request at a time
  p.run_posts();
  CHECK(p.requested == 7);
  auto holder = std::make_shared<int>(42);
  p.lane->lend(7, holder);
  CHECK(p.lane->state() == ReadLane::State::lent);
  CHECK(p.lane->claim(8) == nullptr);
  void* got = p.lane->claim(7);
  REQUIRE(got != nullptr);
  CHECK(*static_cast<int*>(got) == 42);
  CHECK(p.lane->claim(7) == nullptr);  // one reader at a time

  p.peer_writes("abcdefgh");
  CHECK(p.lane->read_more(64) == ReadLane::Read::bytes);
  CHECK(p.held() == "abcdefgh");
  p.lane->consume(2);  // taken by the reader
  p.lane->defer(3);    // passed on to the loop
  p.lane->release(false);
  CHECK(p.lane->state() == ReadLane::State::lent);
  CHECK(p.lane->holds_bytes());
  Bytes deferred;
  p.lane->take_deferred(deferred);
  CHECK(text(deferred) == "cde");

  // The next reader finds what the last one left, then more from the socket.
  REQUIRE(p.lane->claim(7) != nullptr);
  CHECK(p.held() == "fgh");
  p.peer_writes("ij");
  CHECK(p.lane->read_more(64) == ReadLane::Read::bytes);
  CHECK(p.held() == "fghij");
  p.lane->defer(1);
  p.lane->release(true);  // a frame it does not take: the loop's
  CHECK(p.lane->state() == ReadLane::State::returning);
  p.run_posts();
  CHECK(p.backs == 1);
  Bytes back;
  CHECK(p.lane->take_back(back));
  CHECK(text(back) == "fghij");  // passed on first, then left: the order they came in
  CHECK(p.lane->state() == ReadLane::State::loop);
  CHECK(holder.use_count() == 1);  // the lane let go of its holder
}

TEST_CASE("read lane: the socket's end is the reader's to give back, not to name") {
  Pair p;
  p.lane->lend(1, std::make_shared<int>(1));
  REQUIRE(p.lane->claim(1) != nullptr);
  p.peer_writes("z");
  ::shutdown(p.fds[1], SHUT_WR);
  CHECK(p.lane->read_more(64) == ReadLane::Read::bytes);
  CHECK(p.lane->read_more(64) == ReadLane::Read::ended);
  CHECK(p.held() == "z");
  p.lane->release(true);
  p.run_posts();
  Bytes back;
  CHECK(p.lane->take_back(back));
  CHECK(text(back) == "z");
}

// The connection's watch looks at the lane every millisecond and takes it back when bytes wait
// and it is lent to nobody; a reader may claim it between that look and the taking. Asked to stop
// then, a reader inside a rail chunk's body would leave the rest of the body to the loop's decoder,
// which reads it as a malformed frame and fails the job: the watch's taking leaves a reader be.
TEST_CASE("read lane: the loop's look takes the lane back from no reader, and stops none") {
  Pair p;
  p.lane->lend(4, std::make_shared<int>(4));
  p.peer_writes("head");
  REQUIRE(p.lane->claim(4) != nullptr);  // just after the watch saw it lent, with bytes waiting
  Bytes out;
  CHECK_FALSE(p.lane->take_back_idle(out));
  CHECK(out.empty());
  CHECK(p.lane->state() == ReadLane::State::reading);
  // The reader reads on: its body's bytes, as they come.
  std::uint8_t body[8] = {};
  std::size_t got = 0;
  CHECK(p.lane->read_into({body, 4}, got) == ReadLane::Read::bytes);
  CHECK(std::string(reinterpret_cast<const char*>(body), got) == "head");
  p.peer_writes("tail");
  CHECK(p.lane->read_into({body + 4, 4}, got) == ReadLane::Read::bytes);
  CHECK(std::string(reinterpret_cast<const char*>(body), 8) == "headtail");
  p.peer_writes("next");
  CHECK(p.lane->read_more(64) == ReadLane::Read::bytes);
  p.lane->release(false);
  // Lent to nobody now: the look takes it back, with what the reader left.
  CHECK(p.lane->take_back_idle(out));
  CHECK(text(out) == "next");
  CHECK(p.lane->state() == ReadLane::State::loop);
  CHECK(p.lane->take_back_idle(out));  // the loop's already: nothing to do
}

TEST_CASE("read lane: a reader asleep on a quiet socket gives the lane up when the loop wants it") {
  for (const bool closing : {false, true}) {
    CAPTURE(closing);
    Pair p;
    auto holder = std::make_shared<int>(5);
    p.lane->lend(3, holder);
    std::atomic<int> result{-1};
    std::atomic<bool> released{false};
    std::thread reader([&] {
      if (p.lane->claim(3) == nullptr) return;
      result = static_cast<int>(p.lane->read_more(64));
      p.lane->release(false);
      released = true;
    });
    // The reader is asleep (or about to be): nothing comes on the socket.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(result == -1);
    const auto t0 = std::chrono::steady_clock::now();
    if (closing) {
      p.lane->close();
    } else {
      Bytes out;
      CHECK_FALSE(p.lane->take_back(out));  // a reader is at it: it gives the lane back
    }
    while (!released && std::chrono::steady_clock::now() - t0 < woken_within) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    reader.join();
    CHECK(result == static_cast<int>(ReadLane::Read::wanted_back));
    if (closing) {
      CHECK(p.lane->state() == ReadLane::State::closed);
    } else {
      // Wanted back: the release gives it back whatever the reader said, and posts so.
      CHECK(p.lane->state() == ReadLane::State::returning);
      p.run_posts();
      CHECK(p.backs == 1);
      Bytes out;
      CHECK(p.lane->take_back(out));
      CHECK(out.empty());
    }
    CHECK(holder.use_count() == 1);
  }
}
