// Rails (src/remote/job/rails.*) between two Connections over the in-memory pair, on a manual
// clock: a source's rounds arrive at its destination byte for byte and in order, every way a
// hostile peer breaks the rail protocol fails the job with its exact cause, and a message sent
// while a 64 MiB round goes out waits behind at most one chunk. No test here sleeps.
#include "remote/job/rails.hpp"

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remote/io/clock.hpp"
#include "remote/io/memory_transport.hpp"
#include "remote/limits.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"

using namespace rig::remote;
using State = Connection::State;

namespace {

const Key& the_key() {
  static const Key k = key("0123456789abcdef0123456789abcdef").value();
  return k;
}

// One process of a job as far as rails go: its connection's owner routes rail messages and
// RAIL_DATA to its Rails, as the agent's and the controller's protocols do, and fails the job (an
// ABORT with the first cause, every count raised) on a rail's failure or the peer's.
class End final : public ConnectionOwner {
 public:
  explicit End(Reactor& reactor)
      : rails(reactor,
              Rails::Events{
                  [this](HeldRail& r, std::uint64_t round) {
                    log.push_back("sent " + std::to_string(r.id) + ":" + std::to_string(round));
                  },
                  [this](HeldRail& r, std::uint64_t round) {
                    log.push_back("arrived " + std::to_string(r.id) + ":" + std::to_string(round));
                  },
                  [this](HeldRail& r) { log.push_back("ended " + std::to_string(r.id)); },
                  [this](const std::string& cause) { fail(cause); }}) {}

  Rails rails;
  Connection* link = nullptr;
  std::vector<std::string> log;  // the rails' events, and other messages by name
  std::optional<std::string> cause;
  std::size_t data_frames = 0;  // RAIL_DATA frames received
  // RAIL_DATA frames received before each other message, in order.
  std::vector<std::size_t> data_before_other;
  bool closed = false;

  void on_proven(Connection&) noexcept override {}
  void on_message(Connection& c, Message&& m) noexcept override {
    if (const auto* a = std::get_if<Abort>(&m)) {
      log.push_back("abort " + a->reason);
      return fail(c.peer_name() + " aborted: " + a->reason);
    }
    if (Rails::handles(m)) return rails.on_message(c, m);
    data_before_other.push_back(data_frames);
    log.push_back(std::string(std::visit([](const auto& x) { return x.name; }, m)));
  }
  void on_bulk(Connection& c, std::uint8_t type,
               std::span<const std::uint8_t> b) noexcept override {
    if (type != RailData::type) return;
    ++data_frames;
    rails.on_data(c, b.size(), b.data());
  }
  std::span<std::uint8_t> bulk_sink(Connection& c, std::uint8_t type,
                                    std::size_t n) noexcept override {
    return type == RailData::type ? rails.sink(c, n) : std::span<std::uint8_t>{};
  }
  void on_bulk_placed(Connection& c, std::uint8_t type, std::size_t n) noexcept override {
    if (type != RailData::type) return;
    ++data_frames;
    rails.on_data(c, n, nullptr);
  }
  void on_failed(Connection&, const std::string& why) noexcept override { fail(why); }
  void on_refused(Connection&, const std::string& why) noexcept override {
    log.push_back("refused " + why);
  }
  void on_closed(Connection&) noexcept override { closed = true; }

 private:
  void fail(const std::string& why) {
    if (cause) return;
    cause = why;
    rails.raise_all();
    if (link != nullptr) link->end(Abort{clamp_reason(why)});
  }
};

// Host memory of one end: transfers' bytes, each in a buffer of its own with some room before it.
struct Memory {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::span<std::byte>> parts;
  static constexpr std::size_t before = 8;
  explicit Memory(const std::vector<std::size_t>& sizes) {
    for (std::size_t n : sizes) buffers.emplace_back(n + before, std::byte{0});
    for (auto& b : buffers) parts.emplace_back(b.data() + before, b.size() - before);
  }
  void fill(std::uint32_t seed) {
    std::uint32_t x = seed * 2654435761u + 1;
    for (auto p : parts) {
      for (auto& b : p) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<std::byte>(x);
      }
    }
  }
  bool same(const Memory& other) const {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (std::memcmp(parts[i].data(), other.parts[i].data(), parts[i].size()) != 0) return false;
    }
    return true;
  }
  bool untouched_before() const {
    for (const auto& b : buffers) {
      for (std::size_t i = 0; i < before; ++i)
        if (b[i] != std::byte{0}) return false;
    }
    return true;
  }
};

// Two processes' connections to each other, proven: `a`'s to "b" and `b`'s to "a".
struct Pair {
  explicit Pair(std::size_t buffer_bytes = memory_buffer_bytes_default)
      : reactor(clock, Timing{}.tick_ms), net(buffer_bytes), a(reactor), b(reactor) {
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    a_conn = std::make_unique<Connection>(reactor, a, timing, "b");
    b_conn = std::make_unique<Connection>(reactor, b, timing, "a");
    a.link = a_conn.get();
    b.link = b_conn.get();
    // Proven as the controller proves its connections (an agent's link to another agent needs
    // the listener's job): rails run the same on either kind of link.
    const DialerConfig dialer{Role::controller, "controller", new_job_id(), "b", new_instance_id()};
    a_conn->dial(std::move(p.dialer), Handshake::dialer(the_key(), dialer));
    REQUIRE(b_conn->adopt(std::move(p.listener),
                          Handshake::listener(the_key(), {new_instance_id()})) == 0);
    pump();
    REQUIRE(a_conn->state() == State::open);
    REQUIRE(b_conn->state() == State::open);
  }
  ~Pair() {
    // Both connections close before the network and the reactor go.
    for (Connection* c : {a_conn.get(), b_conn.get()}) {
      if (c->state() != State::closing && c->state() != State::closed) c->close_now();
    }
    net.pump();
  }

  // Runs the network and the loop's turns (what Reactor::soon queued: a rail's next chunk, once
  // the kernel took the last at once) until neither has anything to do or `steps_max` steps ran.
  std::size_t pump(std::size_t steps_max = memory_pump_steps_max) {
    std::size_t steps = 0;
    while (steps < steps_max) {
      const std::size_t n = net.pump(steps_max - steps);
      if (n == 0 && !reactor.run_soon()) break;
      steps += std::max<std::size_t>(n, 1);
    }
    return steps;
  }

  // Rail `id` from `from` at a to `to` at b.
  void hold(std::uint32_t id, Memory& from, Memory& to) {
    REQUIRE_FALSE(a.rails.add(id, true, *a_conn, from.parts, nullptr).has_value());
    REQUIRE_FALSE(b.rails.add(id, false, *b_conn, to.parts, nullptr).has_value());
  }

  // Sends raw bytes from b to a, as a hostile peer's frames.
  void raw_to_a(Bytes bytes) {
    const Connection::Piece piece{nullptr, 0, bytes.size()};
    b_conn->send_pieces(std::move(bytes), std::span(&piece, 1), [] {});
  }
  void raw_to_b(Bytes bytes) {
    const Connection::Piece piece{nullptr, 0, bytes.size()};
    a_conn->send_pieces(std::move(bytes), std::span(&piece, 1), [] {});
  }

  const Timing timing{};
  ManualClock clock;
  Reactor reactor;
  MemoryNetwork net;
  End a, b;
  std::unique_ptr<Connection> a_conn, b_conn;
};

// A RAIL_CHUNK and the RAIL_DATA frame of `n` bytes (of value 0x5a) after it, as one write.
Bytes chunk_and_data(const RailChunk& c, std::size_t n) {
  Bytes out;
  encode(c, out);
  const std::size_t at = out.size();
  out.resize(at + frame_header_bytes + n, 0x5a);
  write_frame_header(
      std::span<std::uint8_t, frame_header_bytes>(out.data() + at, frame_header_bytes),
      RailData::type, n);
  return out;
}

Bytes data_alone(std::size_t n) {
  Bytes out(frame_header_bytes + n, 0x5a);
  write_frame_header(std::span<std::uint8_t, frame_header_bytes>(out.data(), frame_header_bytes),
                     RailData::type, n);
  return out;
}

Bytes message(const Message& m) {
  Bytes out;
  encode(m, out);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& e : v) out += (out.empty() ? "" : " | ") + e;
  return out;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE(
      "rails: several transfers across chunk boundaries arrive byte for byte, round by round") {
    Pair p;
    // A byte, one chunk exactly, a chunk and a byte, three chunks and a tail.
    const std::vector<std::size_t> sizes = {1, chunk_bytes, chunk_bytes + 1, 3 * chunk_bytes + 17};
    Memory from(sizes), to(sizes);
    p.hold(1, from, to);
    HeldRail& src = *p.a.rails.find(1);
    HeldRail& dst = *p.b.rails.find(1);
    for (std::uint64_t round = 1; round <= 3; ++round) {
      CAPTURE(round);
      from.fill(static_cast<std::uint32_t>(round));
      // As the controller starts a round: the destination says ready, the source waits for it.
      p.a.rails.go(src, round, true, "controller");
      p.pump();
      CHECK(dst.counts->arrived().get() == round - 1);  // nothing goes before RAIL_READY
      p.b.rails.say_ready(dst, round);
      p.pump();
      CHECK(dst.counts->arrived().get() == round);
      CHECK(src.counts->sent().get() == round);
      CHECK(src.counts->arrived().get() == round);  // the destination's RAIL_COUNT
      CHECK(to.same(from));
      CHECK(to.untouched_before());
    }
    // 1 + 1 + 2 + 4 chunks a round.
    CHECK(p.b.data_frames == 3 * 8);
    CHECK(joined(p.a.log) == "sent 1:1 | sent 1:2 | sent 1:3");
    CHECK(joined(p.b.log) == "arrived 1:1 | arrived 1:2 | arrived 1:3");
    CHECK(!p.a.cause);
    CHECK(!p.b.cause);
    // The end follows the last round on the link; each end lets the rail go.
    p.a.rails.end(src);
    p.pump();
    CHECK(p.a.rails.find(1) == nullptr);
    CHECK(p.b.rails.find(1) == nullptr);
    CHECK(p.b.log.back() == "ended 1");
  }

  // Host code's small rounds leave from its own thread (Rails::write_round, as rig_rail_go calls
  // it) through the link's DirectLane, here on a socket pair standing in for the link's socket:
  // what the test reads there it hands to the destination as raw bytes on the link, in its place
  // among the loop's writes.
  TEST_CASE(
      "rails: host code writes a small round itself while its link is free; the loop counts it "
      "and sends only the rounds it was given") {
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
    Pair p;
    auto lane = std::make_shared<DirectLane>();
    p.a_conn->set_direct_lane(lane);
    lane->open(pair[0], nullptr, p.a_conn.get());
    lane->release();
    Memory from({64, 3}), to({64, 3});
    p.hold(1, from, to);
    HeldRail& src = *p.a.rails.find(1);
    HeldRail& dst = *p.b.rails.find(1);
    const auto take_socket = [&] {
      std::vector<std::uint8_t> got(1 << 20);
      const ssize_t n = ::read(pair[1], got.data(), got.size());
      return n > 0 ? Bytes(got.begin(), got.begin() + n) : Bytes{};
    };
    const auto deliver = [&] {
      Bytes bytes = take_socket();
      REQUIRE_FALSE(bytes.empty());
      p.raw_to_b(std::move(bytes));
      p.pump();
    };
    std::array<std::uint8_t, direct_write_bytes_max> message{};
    std::size_t rest_at = 0, rest_end = 0;
    using How = Rails::Written::How;

    // Round 1 from this thread: its sources read (sent) before the loop has looked at all.
    from.fill(1);
    auto w = Rails::write_round(src, message, rest_at, rest_end);
    CHECK(w.how == How::all);
    CHECK(w.round == 1);
    CHECK(src.numbered.load() == 1);
    CHECK(src.counts->sent().get() == 1);
    CHECK(p.a.log.empty());
    deliver();
    CHECK(to.same(from));
    CHECK(dst.counts->arrived().get() == 1);
    // The destination's count comes back, and the loop counts the round as sent there, once.
    CHECK(src.counts->arrived().get() == 1);
    CHECK(joined(p.a.log) == "sent 1:1");

    // Round 2 posted to the loop (rig_rail_go when it wrote none): the loop sends round 2 only.
    from.fill(2);
    src.numbered.fetch_add(1);
    p.a.rails.host_go(src);
    p.pump();
    CHECK(to.same(from));
    CHECK(joined(p.a.log) == "sent 1:1 | sent 1:2");

    // The loop holds the lane: the round is numbered, nothing written, and the loop sends it.
    from.fill(3);
    p.a_conn->hold_lane();
    w = Rails::write_round(src, message, rest_at, rest_end);
    CHECK(w.how == How::posted);
    CHECK(w.round == 3);
    CHECK(src.counts->sent().get() == 2);
    CHECK(take_socket().empty());
    p.a.rails.host_go(src);
    p.pump();
    CHECK(to.same(from));
    CHECK(joined(p.a.log) == "sent 1:1 | sent 1:2 | sent 1:3");

    // A round numbered and not yet started by the loop, or another thread at it: nothing tried,
    // nothing numbered.
    src.numbered.fetch_add(1);
    w = Rails::write_round(src, message, rest_at, rest_end);
    CHECK(w.how == How::not_tried);
    CHECK(src.numbered.load() == 4);
    from.fill(4);
    p.a.rails.host_go(src);
    p.pump();
    CHECK(to.same(from));
    src.writing.store(true);
    CHECK(Rails::write_round(src, message, rest_at, rest_end).how == How::not_tried);
    src.writing.store(false);

    // A full socket: the kernel takes none of it; the loop writes it (post_rest's end), and a
    // message the loop sends meanwhile follows it.
    from.fill(5);
    const std::vector<std::uint8_t> filler(64 << 10, 1);
    while (::send(pair[0], filler.data(), filler.size(), MSG_DONTWAIT) > 0) {
    }
    w = Rails::write_round(src, message, rest_at, rest_end);
    CHECK(w.how == How::part);
    CHECK(w.round == 5);
    CHECK(rest_at == 0);
    CHECK(lane->rest_due());
    p.a_conn->send(Free{9});
    while (!take_socket().empty()) {
    }
    p.pump();
    CHECK(dst.counts->arrived().get() == 4);  // the FREE waits behind the rest
    p.a_conn->on_posted_rest(Bytes(message.begin() + static_cast<std::ptrdiff_t>(rest_at),
                                   message.begin() + static_cast<std::ptrdiff_t>(rest_end)));
    p.pump();
    CHECK(to.same(from));
    CHECK(joined(p.b.log) ==
          "arrived 1:1 | arrived 1:2 | arrived 1:3 | arrived 1:4 | arrived 1:5 | FREE");
    CHECK(joined(p.a.log) == "sent 1:1 | sent 1:2 | sent 1:3 | sent 1:4 | sent 1:5");
    CHECK(!p.a.cause);
    CHECK(!p.b.cause);

    // A round too large for one small write goes through the loop.
    Memory big_from({direct_write_bytes_max}), big_to({direct_write_bytes_max});
    p.hold(2, big_from, big_to);
    CHECK(Rails::write_round(*p.a.rails.find(2), message, rest_at, rest_end).how == How::not_tried);
    ::close(pair[0]);
    ::close(pair[1]);
  }

  TEST_CASE("rails: rounds started together leave and arrive in order, on two rails of one link") {
    Pair p;
    Memory from1({2 * chunk_bytes + 5}), to1({2 * chunk_bytes + 5});
    Memory from2({100}), to2({100});
    p.hold(1, from1, to1);
    p.hold(2, from2, to2);
    from1.fill(7);
    from2.fill(8);
    HeldRail& r1 = *p.a.rails.find(1);
    HeldRail& r2 = *p.a.rails.find(2);
    // As host code starts them: no RAIL_READY.
    for (std::uint64_t round = 1; round <= 3; ++round) {
      p.a.rails.go(r1, round, false, "");
      p.a.rails.go(r2, round, false, "");
    }
    p.pump();
    CHECK(joined(p.b.log) ==
          "arrived 1:1 | arrived 2:1 | arrived 1:2 | arrived 2:2 | arrived 1:3 | arrived 2:3");
    CHECK(joined(p.a.log) == "sent 1:1 | sent 2:1 | sent 1:2 | sent 2:2 | sent 1:3 | sent 2:3");
    CHECK(to1.same(from1));
    CHECK(to2.same(from2));
    CHECK(r1.counts->arrived().get() == 3);
    CHECK(r2.counts->arrived().get() == 3);
    // A round out of its turn fails the job, naming whose message it was.
    p.a.rails.go(r1, 5, false, "controller");
    CHECK(p.a.cause ==
          "controller: malformed message: RAIL_GO of round 5 of rail 1 where round 4 was due");
  }

  TEST_CASE("rails: a hostile source's every break of the protocol fails the destination, named") {
    struct Case {
      std::string what;
      std::vector<Bytes> frames;  // from a to b (b holds rail 1 as its destination)
      std::string cause;          // b's
    };
    const std::size_t n = 3 * chunk_bytes;
    const std::vector<Case> cases = {
        {"a chunk of a later round",
         {chunk_and_data({1, 2, 0, 0}, 10)},
         "a: malformed message: RAIL_CHUNK of rail 1 round 2 transfer 0 offset 0 where round 1 "
         "transfer 0 offset 0 was due"},
        {"a chunk at the wrong offset",
         {chunk_and_data({1, 1, 0, 0}, 10), chunk_and_data({1, 1, 0, 11}, 10)},
         "a: malformed message: RAIL_CHUNK of rail 1 round 1 transfer 0 offset 11 where round 1 "
         "transfer 0 offset 10 was due"},
        {"a chunk of the wrong transfer",
         {chunk_and_data({1, 1, 1, 0}, 10)},
         "a: malformed message: RAIL_CHUNK of rail 1 round 1 transfer 1 offset 0 where round 1 "
         "transfer 0 offset 0 was due"},
        {"data without a chunk",
         {data_alone(10)},
         "a: malformed message: RAIL_DATA where no RAIL_CHUNK came before it"},
        {"data without a chunk, large enough to be read in place",
         {data_alone(chunk_bytes)},
         "a: malformed message: RAIL_DATA where no RAIL_CHUNK came before it"},
        {"a chunk for an unknown rail",
         {chunk_and_data({9, 1, 0, 0}, 10)},
         "a: malformed message: RAIL_CHUNK names rail 9, which the job does not hold on this "
         "machine"},
        {"a chunk whose data is not next",
         {message(RailChunk{1, 1, 0, 0}), message(RailChunk{1, 1, 0, 0})},
         "a: malformed message: RAIL_CHUNK where the RAIL_DATA of the one before it was due"},
        {"data beyond the transfer",
         {chunk_and_data({1, 1, 0, 0}, n + 1)},
         "a: malformed message: RAIL_DATA of 3145729 bytes where 3145728 of transfer 0 of rail 1 "
         "were due"},
        {"data beyond the transfer, after a chunk read in place",
         {chunk_and_data({1, 1, 0, 0}, chunk_bytes),
          chunk_and_data({1, 1, 0, chunk_bytes}, 2 * chunk_bytes + 1)},
         "a: malformed message: RAIL_DATA of 2097153 bytes where 2097152 of transfer 0 of rail 1 "
         "were due"},
        {"an empty RAIL_DATA",
         {chunk_and_data({1, 1, 0, 0}, 0)},
         "a: malformed message: RAIL_DATA of 0 bytes where 3145728 of transfer 0 of rail 1 were "
         "due"},
        {"an end inside a round",
         {chunk_and_data({1, 1, 0, 0}, 10), message(RailEnd{1})},
         "a: malformed message: RAIL_END of rail 1 inside a round"},
        {"an end where data was due",
         {message(RailChunk{1, 1, 0, 0}), message(RailEnd{1})},
         "a: malformed message: RAIL_END where the RAIL_DATA of a RAIL_CHUNK was due"},
        {"a ready sent to the destination",
         {message(RailReady{1, 1})},
         "a: malformed message: RAIL_READY names rail 1, of which this machine is not the source"},
        {"a count sent to the destination",
         {message(RailCount{1, RailCount::arrived, 1})},
         "a: malformed message: RAIL_COUNT names rail 1, of which this machine is not the source"},
    };
    for (Case c : cases) {
      CAPTURE(c.what);
      Pair p;
      Memory from({n, 64}), to({n, 64});
      REQUIRE_FALSE(p.b.rails.add(1, false, *p.b_conn, to.parts, nullptr).has_value());
      HeldRail& dst = *p.b.rails.find(1);
      for (Bytes& f : c.frames) p.raw_to_b(std::move(f));
      p.pump();
      CHECK_MESSAGE(p.b.cause == c.cause, p.b.cause.value_or("(none)"));
      // Every count raised; the source hears the abort.
      CHECK(dst.counts->arrived().get() == rail_count_raised);
      CHECK(dst.counts->sent().get() == rail_count_raised);
      CHECK(p.a.cause == "b aborted: " + c.cause);
    }
  }

  TEST_CASE("rails: a hostile destination's every break of the protocol fails the source, named") {
    struct Case {
      std::string what;
      std::vector<Bytes> frames;  // from b to a (a holds rail 1 as its source)
      std::string cause;          // a's
    };
    const std::vector<Case> cases = {
        {"a chunk for a rail of which this end is the source",
         {chunk_and_data({1, 1, 0, 0}, 10)},
         "b: malformed message: RAIL_CHUNK names rail 1, of which this machine is not the "
         "destination"},
        {"an end for a rail of which this end is the source",
         {message(RailEnd{1})},
         "b: malformed message: RAIL_END names rail 1, of which this machine is not the "
         "destination"},
        {"a ready for an unknown rail",
         {message(RailReady{4, 1})},
         "b: malformed message: RAIL_READY names rail 4, which the job does not hold on this "
         "machine"},
        {"a ready twice for one round",
         {message(RailReady{1, 1}), message(RailReady{1, 1})},
         "b: malformed message: RAIL_READY for round 1 of rail 1 after round 1"},
        {"an arrived count for a round not started",
         {message(RailCount{1, RailCount::arrived, 1})},
         "b: malformed message: RAIL_COUNT 1 of 1 for rail 1, of which 0 rounds have started"},
        {"a sent count",
         {message(RailCount{1, RailCount::sent, 0})},
         "b: malformed message: RAIL_COUNT 0 of 0 for rail 1, of which 0 rounds have started"},
    };
    for (Case c : cases) {
      CAPTURE(c.what);
      Pair p;
      Memory from({64}), to({64});
      REQUIRE_FALSE(p.a.rails.add(1, true, *p.a_conn, from.parts, nullptr).has_value());
      HeldRail& src = *p.a.rails.find(1);
      for (Bytes& f : c.frames) p.raw_to_a(std::move(f));
      p.pump();
      CHECK_MESSAGE(p.a.cause == c.cause, p.a.cause.value_or("(none)"));
      CHECK(src.counts->sent().get() == rail_count_raised);
      CHECK(src.counts->arrived().get() == rail_count_raised);
      CHECK(p.b.cause == "a aborted: " + c.cause);
    }
  }

  TEST_CASE("rails: a chunk the kernel takes at once has the next wait for the loop's next turn") {
    // The network's buffer holds the whole round: the kernel takes every chunk at once.
    Pair p(32 * chunk_bytes);
    const std::size_t n = 16 * chunk_bytes;
    Memory from({n}), to({n});
    from.fill(5);
    p.hold(1, from, to);
    HeldRail& src = *p.a.rails.find(1);
    HeldRail& dst = *p.b.rails.find(1);
    p.a.rails.go(src, 1, false, "");
    // The network alone, no loop turn: each chunk the reader drains is taken at once, and the
    // next is not sent from inside that write (which would keep the loop from every other socket
    // of the process until the round's last byte).
    p.net.pump();
    CHECK(p.b.data_frames == 1);
    std::size_t turns = 0;
    while (p.reactor.run_soon()) {
      ++turns;
      p.net.pump();
    }
    // A turn per chunk after the first, and one for the arrived count, which host code's rounds
    // (no controller waits) send once the loop is idle.
    CHECK(turns == 16);
    CHECK(p.b.data_frames == 16);
    CHECK(dst.counts->arrived().get() == 1);
    CHECK(to.same(from));
    CHECK(!p.a.cause);
  }

  TEST_CASE("rails: a message sent while a 64 MiB round goes out waits behind one chunk at most") {
    Pair p;
    const std::size_t n = std::size_t{64} << 20;
    Memory from({n}), to({n});
    from.fill(3);
    p.hold(1, from, to);
    HeldRail& src = *p.a.rails.find(1);
    HeldRail& dst = *p.b.rails.find(1);
    // Sent at once after the round starts: behind its first chunk, which the link holds now.
    p.a.rails.go(src, 1, false, "");
    p.a_conn->send(Free{1});
    // Sent in the middle: once 20 chunks have arrived, behind the chunk being written and, if
    // the kernel (the network's buffer) took that one whole, the one after it.
    std::size_t mid_at = 0;
    while (p.b.data_frames < 20 && p.pump(1) > 0) {
    }
    REQUIRE(p.b.data_frames == 20);
    mid_at = p.b.data_frames;
    p.a_conn->send(Free{2});
    p.pump();
    REQUIRE(p.b.data_before_other.size() == 2);
    CHECK(p.b.data_before_other[0] == 1);
    CHECK(p.b.data_before_other[1] >= mid_at + 1);
    CHECK(p.b.data_before_other[1] <= mid_at + 2);
    CHECK(p.b.data_frames == 64);
    CHECK(dst.counts->arrived().get() == 1);
    CHECK(to.same(from));
    CHECK(!p.a.cause);
    CHECK(!p.b.cause);
  }
}
