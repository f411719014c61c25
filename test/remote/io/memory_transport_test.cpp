// The in-memory pair: bytes in order and only when pumped, a bounded buffer that makes a writer's
// backlog grow when its reader stops, EOF after a half-close, resets, and TCP's ends of a stream
// (a close over unread bytes loses what was in flight).
#include "remote/io/memory_transport.hpp"

#include <doctest/doctest.h>
#include <uv.h>

#include <string>

#include "remote/io/transport_support.hpp"

using namespace rig::remote;
using rig::remote::test::Recorder;
using rig::remote::test::slice_of;

namespace {

// Two started ends with their recorders, reading.
struct Ends {
  explicit Ends(std::size_t buffer_bytes = memory_buffer_bytes_default) : net(buffer_bytes) {
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    a = std::move(p.dialer);
    b = std::move(p.listener);
    REQUIRE(a->dialing());
    REQUIRE(!b->dialing());
    REQUIRE(a->start(ra) == 0);
    REQUIRE(b->start(rb) == 0);
    net.pump();
    REQUIRE(ra.log() == "connected 0");
    REQUIRE(a->read_start() == 0);
    REQUIRE(b->read_start() == 0);
  }
  int write(MemoryTransport& t, const std::string& text) {
    const Slice s = slice_of(text);
    return t.write({&s, 1});
  }

  MemoryNetwork net;
  Recorder ra, rb;
  std::unique_ptr<MemoryTransport> a, b;
};

}  // namespace

TEST_CASE("memory pair: bytes arrive in order, and only when the network is pumped") {
  Ends e;
  CHECK(e.a->peer_address() == "10.0.0.2:4123");
  CHECK(e.b->peer_address() == "10.0.0.1:50000");
  const std::string hello = "hello ", wor = "wor", ld = "ld";
  CHECK(e.write(*e.a, hello) == 0);
  const Slice two[] = {slice_of(wor), slice_of(ld)};
  CHECK(e.a->write(two) == 0);
  CHECK(e.rb.bytes.empty());
  CHECK(e.net.pump() > 0);
  CHECK(e.rb.text() == "hello world");  // read 7 bytes at a time, in order
  const std::string back = "and back";
  CHECK(e.write(*e.b, back) == 0);
  e.net.pump();
  CHECK(e.ra.text() == "and back");
  CHECK(e.a->bytes_sent() == 11);
  TcpSendState s{};
  REQUIRE(e.a->send_state(s));
  CHECK(s.acked_bytes == 11);
  CHECK(s.queued_bytes == 0);
  CHECK(e.net.pump() == 0);  // nothing left to do
  CHECK(e.ra.log() == "connected 0");
}

TEST_CASE("memory pair: a reader that stops reading makes the writer's backlog grow") {
  Ends e(64);
  e.b->hold_reads(true);
  const std::string first(100, 'x'), second = "behind";
  CHECK(e.write(*e.a, first) == write_queued);
  CHECK(e.a->queued_bytes() == 36);  // 64 fit in the buffer
  CHECK(e.write(*e.a, second) == write_queued);
  CHECK(e.a->queued_bytes() == 42);
  for (int i = 0; i < 3; ++i) e.net.pump();
  TcpSendState s{};
  REQUIRE(e.a->send_state(s));
  CHECK(s.acked_bytes == 0);  // nothing acknowledged while the reader takes nothing
  CHECK(s.queued_bytes == 64);
  CHECK(e.ra.log() == "connected 0");  // no write completed
  CHECK(e.rb.bytes.empty());

  e.b->hold_reads(false);
  e.net.pump();
  CHECK(e.rb.text() == first + second);
  CHECK(e.ra.log() == "connected 0, written 0, written 0");
  CHECK(e.a->queued_bytes() == 0);
  REQUIRE(e.a->send_state(s));
  CHECK(s.acked_bytes == 106);
  CHECK(s.queued_bytes == 0);
}

TEST_CASE("memory pair: a half-close comes after every queued write, and the peer reads EOF") {
  Ends e(16);
  const std::string text(40, 'y');
  CHECK(e.write(*e.a, text) == write_queued);
  CHECK(e.a->shutdown() == 0);
  const std::string late = "late";
  CHECK(e.write(*e.a, late) == UV_EPIPE);
  e.net.pump();
  CHECK(e.rb.text() == text);
  CHECK(e.rb.log() == "end EOF");
  CHECK(e.ra.log() == "connected 0, written 0, shutdown 0");
  // The other direction is still open.
  const std::string reply = "still here";
  CHECK(e.write(*e.b, reply) == 0);
  e.net.pump();
  CHECK(e.ra.text() == reply);
}

TEST_CASE("memory pair: a reset ends both reads with ECONNRESET and loses what was in flight") {
  Ends e;
  e.b->hold_reads(true);
  const std::string lost = "lost";
  CHECK(e.write(*e.a, lost) == 0);
  e.a->reset();
  e.b->hold_reads(false);
  e.net.pump();
  CHECK(e.rb.bytes.empty());
  CHECK(e.rb.log() == "end ECONNRESET");
  CHECK(e.ra.log() == "connected 0, end ECONNRESET");
  CHECK(e.write(*e.a, lost) == 0);  // into a stream that is gone: vanishes
  e.a->close();
  e.b->close();
  e.net.pump();
  CHECK(e.ra.closed);
  CHECK(e.rb.closed);
}

TEST_CASE("memory pair: a close over nothing unread is a FIN; over unread bytes, a reset") {
  SUBCASE("nothing unread: the peer reads what was written, then EOF") {
    Ends e;
    e.b->hold_reads(true);
    const std::string abort = "abort";
    CHECK(e.write(*e.a, abort) == 0);
    e.a->close();
    e.net.pump();
    CHECK(e.ra.log() == "connected 0, closed");
    e.b->hold_reads(false);
    e.net.pump();
    CHECK(e.rb.text() == abort);
    CHECK(e.rb.log() == "end EOF");
  }
  SUBCASE("bytes unread: the peer's reads end with a reset, and what it had not taken is lost") {
    Ends e;
    e.a->hold_reads(true);
    const std::string unread = "unread", abort = "abort";
    CHECK(e.write(*e.b, unread) == 0);
    e.b->hold_reads(true);
    CHECK(e.write(*e.a, abort) == 0);
    e.a->close();
    e.net.pump();
    e.b->hold_reads(false);
    e.net.pump();
    CHECK(e.rb.bytes.empty());
    CHECK(e.rb.log() == "end ECONNRESET");
  }
  SUBCASE("writes still queued are cancelled before the close; what was handed on arrives") {
    Ends e(8);
    e.b->hold_reads(true);
    const std::string text(20, 'z');
    CHECK(e.write(*e.a, text) == write_queued);
    CHECK(e.a->shutdown() == 0);
    e.a->close();
    e.net.pump();
    CHECK(e.ra.log() == "connected 0, written ECANCELED, shutdown ECANCELED, closed");
    const std::string after = "after";
    CHECK(e.write(*e.b, after) == 0);  // into a closed end: vanishes
    e.b->hold_reads(false);
    e.net.pump();
    // What was handed on before the close still arrives, and the FIN that came before the
    // reset of b's write is what b reads.
    CHECK(e.rb.text() == text.substr(0, 8));
    CHECK(e.rb.log() == "end EOF");
    TcpSendState s{};
    REQUIRE(e.b->send_state(s));
    CHECK(s.acked_bytes == 0);
  }
}

TEST_CASE("memory network: an unreachable end reports its connect's failure") {
  MemoryNetwork net;
  Recorder r;
  auto t = net.unreachable(UV_ECONNREFUSED);
  CHECK(t->start(r) == 0);
  net.pump();
  CHECK(r.log() == "connected ECONNREFUSED");
  t->close();
  net.pump();
  CHECK(r.closed);
}
