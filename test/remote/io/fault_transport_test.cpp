// The fault decorator over an in-memory pair: each fault, and that without one bytes pass as they
// would.
#include "remote/io/fault_transport.hpp"

#include <doctest/doctest.h>
#include <uv.h>

#include <string>

#include "remote/io/memory_transport.hpp"
#include "remote/io/transport_support.hpp"

using namespace rig::remote;
using rig::remote::test::Recorder;
using rig::remote::test::slice_of;
using Flow = FaultTransport::Flow;

namespace {

// `a` is a FaultTransport over one end of a pair; `b` the other end, plain.
struct Faulty {
  explicit Faulty(std::size_t buffer_bytes = memory_buffer_bytes_default)
      : reactor(clock, 100), net(buffer_bytes) {
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    a_end = p.dialer.get();
    a = std::make_unique<FaultTransport>(std::move(p.dialer), reactor);
    b = std::move(p.listener);
    REQUIRE(a->dialing());
    REQUIRE(a->start(ra) == 0);
    REQUIRE(b->start(rb) == 0);
    net.pump();
    REQUIRE(ra.log() == "connected 0");
    REQUIRE(a->read_start() == 0);
    REQUIRE(b->read_start() == 0);
  }
  ~Faulty() {
    a->close();
    b->close();
    settle();
  }
  int write(Transport& t, const std::string& text) {
    const Slice s = slice_of(text);
    return t.write({&s, 1});
  }
  // A tick of the reactor (the decorator's poll), then the network.
  void settle() {
    reactor.tick_now();
    net.pump();
  }
  void advance(std::int64_t ms) {
    clock.advance(ms);
    settle();
  }

  ManualClock clock;
  Reactor reactor;
  MemoryNetwork net;
  Recorder ra, rb;
  MemoryTransport* a_end;
  std::unique_ptr<FaultTransport> a;
  std::unique_ptr<MemoryTransport> b;
};

}  // namespace

TEST_CASE("fault transport: with no fault, bytes and events pass unchanged") {
  Faulty f;
  const std::string out = "out", in = "in";
  CHECK(f.write(*f.a, out) == 0);
  CHECK(f.write(*f.b, in) == 0);
  f.settle();
  CHECK(f.rb.text() == out);
  CHECK(f.ra.text() == in);
  CHECK(f.a->peer_address() == "10.0.0.2:4123");
  TcpSendState s{};
  REQUIRE(f.a->send_state(s));
  CHECK(s.acked_bytes == 3);
}

TEST_CASE("fault transport: dropped bytes vanish, in either direction, while the drop is on") {
  Faulty f;
  const std::string one = "one", two = "two", three = "three";
  f.a->drop(Flow::out, true);
  CHECK(f.write(*f.a, one) == 0);
  f.a->drop(Flow::out, false);
  CHECK(f.write(*f.a, two) == 0);
  f.a->drop(Flow::in, true);
  CHECK(f.write(*f.b, three) == 0);
  f.settle();
  CHECK(f.rb.text() == "two");
  CHECK(f.ra.bytes.empty());
  f.a->drop(Flow::in, false);
  CHECK(f.write(*f.b, one) == 0);
  f.settle();
  CHECK(f.ra.text() == "one");
}

TEST_CASE("fault transport: delayed bytes arrive that much later, in order") {
  Faulty f;
  f.a->delay(Flow::out, 300);
  const std::string late = "late", later = "+later";
  CHECK(f.write(*f.a, late) == 0);  // handed on, as a socket takes bytes the network then delays
  f.advance(100);
  CHECK(f.write(*f.a, later) == 0);
  f.advance(199);
  CHECK(f.rb.bytes.empty());
  f.advance(1);
  CHECK(f.rb.text() == "late");
  f.advance(100);
  CHECK(f.rb.text() == "late+later");

  f.a->delay(Flow::in, 500);
  const std::string back = "back";
  CHECK(f.write(*f.b, back) == 0);
  f.b->shutdown();
  f.settle();  // the bytes and the EOF reach the decorator now
  f.advance(400);
  CHECK(f.ra.bytes.empty());
  CHECK(f.ra.read_end == 0);
  f.advance(100);
  CHECK(f.ra.text() == "back");
  CHECK(f.ra.read_end == UV_EOF);  // the end waits behind the delayed bytes
}

TEST_CASE("fault transport: a stalled direction backs up its writer until it moves again") {
  SUBCASE("out: writes wait here, nothing is acknowledged, then they go and complete") {
    Faulty f;
    f.a->stall(Flow::out, true);
    const std::string held = "held back";
    CHECK(f.write(*f.a, held) == write_queued);
    CHECK(f.a->queued_bytes() == held.size());
    for (int i = 0; i < 3; ++i) f.advance(1000);
    CHECK(f.rb.bytes.empty());
    TcpSendState s{};
    REQUIRE(f.a->send_state(s));
    CHECK(s.acked_bytes == 0);
    CHECK(f.ra.log() == "connected 0");
    f.a->stall(Flow::out, false);
    f.settle();
    CHECK(f.rb.text() == held);
    CHECK(f.ra.log() == "connected 0, written 0");
    CHECK(f.a->queued_bytes() == 0);
  }
  SUBCASE("in: this end reads nothing, so the peer's writes fill the buffer and wait") {
    Faulty f(32);
    f.a->stall(Flow::in, true);
    const std::string big(100, 'q');
    CHECK(f.write(*f.b, big) == write_queued);
    for (int i = 0; i < 3; ++i) f.advance(1000);
    CHECK(f.b->queued_bytes() == 68);
    CHECK(f.ra.bytes.empty());
    f.a->stall(Flow::in, false);
    f.settle();
    CHECK(f.ra.text() == big);
    CHECK(f.rb.log() == "written 0");
  }
  SUBCASE("a close cancels the writes the stall holds, after the inner transport's") {
    Faulty f;
    f.a->stall(Flow::out, true);
    const std::string held = "held";
    CHECK(f.write(*f.a, held) == write_queued);
    f.a->close();
    f.settle();
    CHECK(f.ra.log() == "connected 0, written ECANCELED, closed");
  }
}

TEST_CASE("fault transport: a corrupted byte is changed where it passes, once") {
  Faulty f;
  f.a->corrupt(Flow::out, 6, 0x20);  // the second 'l' of the first "hello"
  f.a->corrupt(Flow::in, 1, 0x01);
  const std::string first = "abc", second = "hello", third = "hello";
  CHECK(f.write(*f.a, first) == 0);
  CHECK(f.write(*f.a, second) == 0);
  CHECK(f.write(*f.a, third) == 0);
  const std::string back = "abc";
  CHECK(f.write(*f.b, back) == 0);
  f.settle();
  CHECK(f.rb.text() == "abchelLohello");
  CHECK(f.ra.text() == "acc");
}

TEST_CASE("fault transport: one direction closed") {
  SUBCASE("out: the peer reads EOF after what went before; later writes fail") {
    Faulty f;
    const std::string before = "before", after = "after";
    CHECK(f.write(*f.a, before) == 0);
    f.a->shut(Flow::out);
    CHECK(f.write(*f.a, after) == UV_EPIPE);
    f.settle();
    CHECK(f.rb.text() == before);
    CHECK(f.rb.read_end == UV_EOF);
    const std::string reply = "reply";  // the other direction still works
    CHECK(f.write(*f.b, reply) == 0);
    f.settle();
    CHECK(f.ra.text() == reply);
  }
  SUBCASE("in: this end reads EOF, and what arrives later is discarded") {
    Faulty f;
    f.a->shut(Flow::in);
    const std::string later = "later";
    CHECK(f.write(*f.b, later) == 0);
    f.settle();
    CHECK(f.ra.bytes.empty());
    CHECK(f.ra.read_end == UV_EOF);
  }
}

TEST_CASE("fault transport: a reset reaches both ends") {
  Faulty f;
  f.a->reset();
  f.settle();
  CHECK(f.ra.read_end == UV_ECONNRESET);
  CHECK(f.rb.read_end == UV_ECONNRESET);
}
