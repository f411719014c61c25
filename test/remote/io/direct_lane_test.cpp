// DirectLane over a real loopback TCP connection: a caller writes only while the loop leaves the
// lane free, runs its `before` first, and what the kernel did not take stays the loop's to write
// (rest_due) until the loop says it has; a closed lane writes nothing. News the loop leaves in the
// lane goes with the next write, whoever makes it.
#include "remote/io/direct_lane.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

using namespace rig::remote;
using Wrote = DirectLane::Wrote;

namespace {

// A connected loopback pair with small buffers (so that a large write cannot go whole): the
// writer's end, then the reader's.
std::pair<int, int> small_tcp_pair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  const int small = 4096;
  REQUIRE(::setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  const int writer = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::setsockopt(writer, SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
  REQUIRE(::connect(writer, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  const int reader = ::accept(listener, nullptr, nullptr);
  REQUIRE(reader >= 0);
  ::close(listener);
  return {writer, reader};
}

std::vector<std::uint8_t> read_exactly(int fd, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out.data() + got, n - got);
    REQUIRE(r > 0);
    got += static_cast<std::size_t>(r);
  }
  return out;
}

// Writes to `fd` until the kernel takes no more (the reader reads nothing meanwhile).
void fill(int fd) {
  const std::vector<std::uint8_t> filler(64 << 10, 1);
  while (::send(fd, filler.data(), filler.size(), MSG_DONTWAIT) > 0) {
  }
}

void count(void* context) {
  ++*static_cast<int*>(context);
}

}  // namespace

TEST_CASE(
    "direct lane: callers write only while the loop leaves it free; a partial write is the "
    "loop's to finish") {
  const auto [writer, reader] = small_tcp_pair();
  DirectLane lane;
  const std::vector<std::uint8_t> small(100, 7);
  int before = 0;

  // Closed, then open but the loop's until its first release: nothing written, nothing run.
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);
  lane.open(writer, nullptr);
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);
  CHECK(before == 0);

  // Free: the bytes go whole, after `before`.
  lane.release();
  auto out = lane.try_write(small, count, &before);
  CHECK(out.wrote == Wrote::all);
  CHECK(out.written == small.size());
  CHECK(before == 1);
  CHECK(read_exactly(reader, small.size()) == small);

  // The loop claims it for a write of its own: callers wait for the release.
  lane.claim();
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);
  CHECK(before == 1);
  lane.release();

  // More than the buffers hold: part goes, the rest is due from the loop, and the lane stays
  // the loop's (a release does not free it) until the rest is written and it releases again.
  const std::vector<std::uint8_t> large(4 << 20, 9);
  out = lane.try_write(large, count, &before);
  CHECK(out.wrote == Wrote::part);
  CHECK(out.written < large.size());
  CHECK(before == 2);
  CHECK(lane.rest_due());
  lane.release();
  CHECK(lane.rest_due());
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);
  lane.rest_written();
  CHECK_FALSE(lane.rest_due());
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);  // the loop's still
  lane.release();

  // A full socket: a caller's write takes nothing, and all of it is the loop's.
  fill(writer);
  out = lane.try_write(small, count, &before);
  CHECK(out.wrote == Wrote::part);
  CHECK(out.written == 0);
  // A connection that ends in order keeps that rest due, and the lane closes once it is written.
  lane.close(true);
  CHECK(lane.rest_due());
  lane.rest_written();
  CHECK_FALSE(lane.rest_due());
  lane.release();
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);

  // Closed at once: nothing more, whatever was due.
  lane.open(writer, nullptr);
  lane.release();
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::part);
  lane.close(false);
  CHECK_FALSE(lane.rest_due());
  CHECK(lane.try_write(small, count, &before).wrote == Wrote::none);
  ::close(writer);
  ::close(reader);
}

namespace {

std::vector<std::uint8_t> joined(std::vector<std::uint8_t> a, const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE(
    "direct lane: news the loop leaves in it goes in front of the next write, a caller's or the "
    "loop's, and what a partial write left of it in front of the rest") {
  const auto [writer, reader] = small_tcp_pair();
  DirectLane lane;
  const std::vector<std::uint8_t> news(30, 3), more(20, 4), small(100, 7);
  int before = 0;

  // Closed: no news kept (the connection keeps it).
  CHECK_FALSE(lane.carry(news));
  CHECK_FALSE(lane.carries());
  lane.open(writer, nullptr);

  // The loop's: kept, and the loop's next write takes it, in order, leaving none.
  CHECK(lane.carry(news));
  CHECK(lane.carry(more));
  CHECK(lane.carries());
  Bytes taken;
  CHECK_FALSE(lane.claim(&taken));
  CHECK(std::vector<std::uint8_t>(taken.begin(), taken.end()) == joined(news, more));
  CHECK_FALSE(lane.carries());

  // Free, with news: the lane stays free, and a caller's write sends the news, then its bytes,
  // in one write; `written` counts the caller's own.
  lane.release();
  CHECK(lane.carry(news));
  auto out = lane.try_write(small, count, &before);
  CHECK(out.wrote == Wrote::all);
  CHECK(out.written == small.size());
  CHECK_FALSE(lane.carries());
  CHECK(read_exactly(reader, news.size() + small.size()) == joined(news, small));

  // A full socket: nothing of the news nor of the bytes goes; the news stays, in front of the
  // caller's rest, and no news is kept while that rest is due (the connection holds it, for
  // after the rest).
  CHECK(lane.carry(news));
  fill(writer);
  out = lane.try_write(small, count, &before);
  CHECK(out.wrote == Wrote::part);
  CHECK(out.written == 0);
  CHECK(lane.carries());
  CHECK_FALSE(lane.carry(more));
  Bytes unclaimed;
  CHECK(lane.claim(&unclaimed));  // a rest is due: the loop's write waits, and takes no news
  CHECK(unclaimed.empty());
  Bytes front;
  lane.take_carried(front);
  CHECK(std::vector<std::uint8_t>(front.begin(), front.end()) == news);
  CHECK_FALSE(lane.carries());

  // Closed for good: what it carried is dropped with it.
  lane.rest_written();
  lane.release();
  CHECK(lane.carry(more));
  lane.close(false);
  CHECK_FALSE(lane.carries());
  ::close(writer);
  ::close(reader);
}
