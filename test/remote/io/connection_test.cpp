// Connection over the in-memory pair, on a manual clock: a controller's connection and an agent's,
// proving the key to each other, then each liveness rule and each way a connection ends, with the
// root causes worded as connection.cpp words them and detected at the bound the spec gives, not a
// tick before. No test here sleeps; real processes prove the same over TCP (../fault_test.cpp).
#include "remote/io/connection.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remote/io/fault_transport.hpp"
#include "remote/io/memory_transport.hpp"
#include "remote/io/transport_support.hpp"
#include "remote/wire/codec.hpp"

using namespace rig::remote;
using Flow = FaultTransport::Flow;
using State = Connection::State;

namespace {

const Key& the_key() {
  static const Key k = key("0123456789abcdef0123456789abcdef").value();
  return k;
}

// The part of a job a connection reports to, as JobCore reacts: a failure or an ABORT fails it,
// which ends the connection with an ABORT carrying the first cause.
class Owner final : public ConnectionOwner {
 public:
  explicit Owner(std::string our_peer_name = {}) : rename_to_(std::move(our_peer_name)) {}

  std::vector<std::string> log;  // "proven", "abort REASON", "PING", "failed CAUSE", "closed"...
  std::optional<std::string> cause;
  bool closed = false;

  std::string text() const {
    std::string out;
    for (const auto& e : log) out += (out.empty() ? "" : " | ") + e;
    return out;
  }

  void on_proven(Connection& c) noexcept override {
    if (!rename_to_.empty()) c.set_peer_name(rename_to_);  // as the agent names its controller
    log.push_back("proven");
  }
  void on_message(Connection& c, Message&& m) noexcept override {
    if (const auto* a = std::get_if<Abort>(&m)) {
      log.push_back("abort " + a->reason);
      fail(c, c.peer_name() + " aborted: " + a->reason);
      return;
    }
    log.push_back(std::string(std::visit([](const auto& x) { return x.name; }, m)));
  }
  void on_bulk(Connection&, std::uint8_t, std::span<const std::uint8_t> bytes) noexcept override {
    bulk_bytes += bytes.size();
    if (placing) placing();
  }
  void on_failed(Connection& c, const std::string& why) noexcept override {
    log.push_back("failed " + why);
    fail(c, why);
  }
  void on_refused(Connection&, const std::string& why) noexcept override {
    log.push_back("refused " + why);
  }
  void on_closed(Connection&) noexcept override {
    closed = true;
    log.push_back("closed");
  }

  std::span<std::uint8_t> bulk_sink(Connection&, std::uint8_t,
                                    std::size_t bytes) noexcept override {
    return sink ? sink(bytes) : std::span<std::uint8_t>{};
  }
  void on_bulk_placed(Connection&, std::uint8_t, std::size_t bytes) noexcept override {
    placed_bytes += bytes;
  }

  std::size_t bulk_bytes = 0;
  std::function<void()> placing;  // runs as each bulk frame is placed: a test's slow placement
  // Where a bulk frame's body of this many bytes goes straight from the socket (empty: through
  // on_bulk), and the bytes placed there.
  std::function<std::span<std::uint8_t>(std::size_t)> sink;
  std::size_t placed_bytes = 0;

 private:
  void fail(Connection& c, const std::string& why) {
    if (cause) return;  // the first cause wins
    cause = why;
    c.end(Abort{clamp_reason(why)});
  }
  std::string rename_to_;
};

// A transport that passes everything through, but once armed reports its next read one byte
// longer than the buffer it was given: a bug inside a callback, which Connection's guard turns
// into the connection's failure instead of std::terminate.
// It also keeps, while `recording`, where each read went and how much it brought.
class Liar final : public Transport, private TransportEvents {
 public:
  explicit Liar(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  bool armed = false;
  bool recording = false;
  std::vector<std::span<const std::uint8_t>> reads;

  bool dialing() const noexcept override { return inner_->dialing(); }
  int start(TransportEvents& events) override {
    events_ = &events;
    return inner_->start(*this);
  }
  int read_start() override { return inner_->read_start(); }
  void read_stop() override { inner_->read_stop(); }
  int write(std::span<const Slice> slices) override { return inner_->write(slices); }
  int shutdown() override { return inner_->shutdown(); }
  void close() override { inner_->close(); }
  void reset() override { inner_->reset(); }
  std::size_t queued_bytes() const noexcept override { return inner_->queued_bytes(); }
  bool send_state(TcpSendState& out) const noexcept override { return inner_->send_state(out); }
  std::size_t unread_bytes() const noexcept override { return inner_->unread_bytes(); }
  std::string peer_address() const override { return inner_->peer_address(); }

 private:
  void on_connected(int status) noexcept override { events_->on_connected(status); }
  std::span<std::uint8_t> read_buffer(std::size_t suggested) noexcept override {
    const auto b = events_->read_buffer(suggested);
    given_ = b.size();
    given_at_ = b.data();
    return b;
  }
  void on_read(std::size_t bytes) noexcept override {
    if (recording && bytes > 0) reads.emplace_back(given_at_, bytes);
    events_->on_read(armed && bytes > 0 ? given_ + 1 : bytes);
  }
  void on_read_end(int status) noexcept override { events_->on_read_end(status); }
  void on_written(int status) noexcept override { events_->on_written(status); }
  void on_shutdown(int status) noexcept override { events_->on_shutdown(status); }
  void on_closed() noexcept override { events_->on_closed(); }
  void on_transport_error(const std::string& what) noexcept override {
    events_->on_transport_error(what);
  }

  std::unique_ptr<Transport> inner_;
  TransportEvents* events_ = nullptr;
  std::size_t given_ = 0;
  const std::uint8_t* given_at_ = nullptr;
};

// A controller's connection to agent "h100-a" and the agent's to it, each over a fault decorator
// on one end of an in-memory pair, proven to each other at `t0`.
struct Ends {
  explicit Ends(Timing agent_timing = Timing{})
      : reactor(clock, Timing{}.tick_ms), net(), agent_owner("controller") {
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    ctl_end = p.dialer.get();
    agent_end = p.listener.get();
    auto liar = std::make_unique<Liar>(std::move(p.dialer));
    ctl_liar = liar.get();
    auto agent_reads = std::make_unique<Liar>(std::move(p.listener));
    agent_liar = agent_reads.get();
    auto cf = std::make_unique<FaultTransport>(std::move(liar), reactor);
    auto af = std::make_unique<FaultTransport>(std::move(agent_reads), reactor);
    ctl_faults = cf.get();
    agent_faults = af.get();
    ctl = std::make_unique<Connection>(reactor, ctl_owner, timing, "h100-a");
    agent = std::make_unique<Connection>(reactor, agent_owner, agent_timing, "a connection");
    const DialerConfig dialer{Role::controller, "controller", new_job_id(), "h100-a",
                              new_instance_id()};
    ctl->dial(std::move(cf), Handshake::dialer(the_key(), dialer));
    REQUIRE(agent->adopt(std::move(af), Handshake::listener(the_key(), {new_instance_id()})) == 0);
    CHECK(ctl->state() == State::connecting);
    net.pump();
    REQUIRE(ctl->state() == State::open);
    REQUIRE(agent->state() == State::open);
    REQUIRE(ctl_owner.text() == "proven");
    REQUIRE(agent_owner.text() == "proven");
    CHECK(agent->peer_address() == "10.0.0.1:50000");
    t0 = clock.now_ms();
  }

  // Moves the clock on by `ms`, a tick at a time, each tick followed by the network's deliveries.
  void advance(std::int64_t ms) {
    for (std::int64_t done = 0; done < ms; done += timing.tick_ms) {
      clock.advance(timing.tick_ms);
      reactor.tick_now();
      net.pump();
    }
  }
  std::int64_t since_t0() const { return clock.now_ms() - t0; }
  // The controller sends `payload` as PAYLOAD frames from where it lies; `done` once it is sent.
  void send_payload(std::span<const std::uint8_t> payload, bool& done) {
    Bytes owned;
    rig::detail::PoolVector<Connection::Piece> pieces;
    add_bulk_frames(owned, pieces, Payload::type, payload);
    ctl->send_pieces(std::move(owned), pieces, [&done] { done = true; });
  }
  // Runs until both connections have closed, at most `ms_max`.
  void finish(std::int64_t ms_max = 30'000) {
    net.pump();
    for (std::int64_t ms = 0; ms < ms_max && !(ctl_owner.closed && agent_owner.closed);
         ms += timing.tick_ms) {
      advance(timing.tick_ms);
    }
    CHECK(ctl_owner.closed);
    CHECK(agent_owner.closed);
  }

  const Timing timing{};
  ManualClock clock;
  Reactor reactor;
  MemoryNetwork net;
  Owner ctl_owner;
  Owner agent_owner;
  MemoryTransport* ctl_end = nullptr;
  MemoryTransport* agent_end = nullptr;
  Liar* ctl_liar = nullptr;
  Liar* agent_liar = nullptr;  // the agent's reads, as its transport made them
  FaultTransport* ctl_faults = nullptr;
  FaultTransport* agent_faults = nullptr;
  std::unique_ptr<Connection> ctl;
  std::unique_ptr<Connection> agent;
  std::int64_t t0 = 0;
};

std::size_t heartbeat_bytes() {
  Bytes b;
  encode(Heartbeat{}, b);
  return b.size();
}

// Timing for a peer whose own silence rule must not fire first in a test of the other end's.
Timing patient() {
  Timing t;
  t.silence_timeout_ms = 60'000;
  return t;
}

}  // namespace

TEST_CASE("connection: each end sends a heartbeat after 800 ms of quiet, and neither goes silent") {
  Ends j;
  const std::uint64_t ctl_sent = j.ctl_end->bytes_sent();
  const std::uint64_t agent_sent = j.agent_end->bytes_sent();
  j.advance(700);
  CHECK(j.ctl_end->bytes_sent() == ctl_sent);
  CHECK(j.agent_end->bytes_sent() == agent_sent);
  j.advance(100);
  CHECK(j.ctl_end->bytes_sent() == ctl_sent + heartbeat_bytes());
  CHECK(j.agent_end->bytes_sent() == agent_sent + heartbeat_bytes());
  j.advance(30'000 - 800);
  // One at 800 ms, 1600 ms, ... 29.6 s: 37 in 30 s, and nothing else on a quiet connection.
  CHECK(j.ctl_end->bytes_sent() == ctl_sent + 37 * heartbeat_bytes());
  CHECK(j.agent_end->bytes_sent() == agent_sent + 37 * heartbeat_bytes());
  CHECK(j.ctl->state() == State::open);
  CHECK(j.agent->state() == State::open);
  CHECK(j.ctl_owner.text() == "proven");
  CHECK(j.agent_owner.text() == "proven");  // heartbeats never reach the owner
}

TEST_CASE("connection: a peer that sends nothing for 10 s fails the connection, not before") {
  Ends j;
  j.agent_faults->drop(Flow::out, true);  // the agent's bytes vanish, its heartbeats included
  j.advance(9'900);
  CHECK(j.ctl->state() == State::open);
  CHECK(!j.ctl_owner.cause);
  j.advance(100);
  CHECK(j.since_t0() == 10'000);
  CHECK(j.ctl_owner.cause == "h100-a: sent nothing for 10 s");
  CHECK(j.ctl->state() != State::open);
  // The agent hears the abort, whose cause it records as the controller's.
  j.finish();
  CHECK(j.agent_owner.cause == "controller aborted: h100-a: sent nothing for 10 s");
}

TEST_CASE("connection: a peer that stops reading fails the writer after 10 s without progress") {
  Ends j(patient());
  // A tick first: the rule counts the acknowledgement of the handshake's bytes, which the first
  // tick sees, as progress; the stall is then timed from the send.
  j.advance(100);
  const std::int64_t t1 = j.clock.now_ms();
  j.agent_faults->stall(Flow::in, true);
  const std::vector<std::uint8_t> payload(4 * 1024 * 1024, 0x5a);
  bool done = false;
  j.send_payload(payload, done);
  // What the network's buffer does not take waits in the controller's transport.
  const std::size_t sent_bytes = payload.size() + 4 * frame_header_bytes;
  CHECK(j.ctl->backlog_bytes() == sent_bytes - memory_buffer_bytes_default);
  CHECK(!done);
  j.advance(9'900);
  CHECK(j.ctl->state() == State::open);
  CHECK(!j.ctl_owner.cause);
  j.advance(100);
  CHECK(j.clock.now_ms() - t1 == 10'000);
  CHECK(j.ctl_owner.cause == "h100-a: a send made no progress for 10 s");
  CHECK(j.ctl->state() == State::ending);
  // The drain: the controller reads the agent's heartbeats for 10 s after its end, then closes,
  // dropping what never left (the caller hears that its write is done with).
  j.advance(9'900);
  CHECK(j.ctl->state() == State::ending);
  j.advance(100);
  CHECK(j.ctl_owner.closed);
  CHECK(done);
  CHECK(j.clock.now_ms() - t1 == 20'000);
  // The agent reads again: what reached the network arrives, a frame cut short (never handed on),
  // then the controller's end.
  j.agent_faults->stall(Flow::in, false);
  j.finish();
  CHECK(j.agent_owner.bulk_bytes == 0);
  CHECK(j.agent_owner.cause == "controller: closed its connection");
}

TEST_CASE("connection: end() with an ABORT sends it before the half-close, then drains") {
  SUBCASE("the peer answers: both close as soon as each has read the other's end") {
    Ends j;
    j.ctl->end(Abort{"stop"});
    CHECK(j.ctl->state() == State::ending);
    j.net.pump();
    // The abort came before the EOF: the agent failed with the abort's cause, not the close.
    CHECK(j.agent_owner.text() == "proven | abort stop | closed");
    CHECK(j.agent_owner.cause == "controller aborted: stop");
    // The agent's own abort reached the controller while it drained: read and discarded.
    CHECK(j.ctl_owner.text() == "proven | closed");
    CHECK(j.since_t0() == 0);
  }
  SUBCASE("the peer reads nothing: the drain closes 10 s after the end, and the abort arrives") {
    Ends j(patient());
    j.agent_faults->stall(Flow::in, true);
    j.ctl->end(Abort{"stop"});
    j.advance(9'900);
    CHECK(j.ctl->state() == State::ending);  // still reading the agent's heartbeats
    j.advance(100);
    CHECK(j.ctl_owner.closed);
    CHECK(j.since_t0() == 10'000);
    // It closed with nothing of the agent's unread, so nothing was reset: the abort waits in
    // the network for the agent, and comes before the end of the stream.
    j.agent_faults->stall(Flow::in, false);
    j.finish();
    CHECK(j.agent_owner.text() == "proven | abort stop | closed");
  }
  SUBCASE("without the drain, a close over unread bytes resets the stream and loses the abort") {
    Ends j;
    j.ctl_faults->stall(Flow::in, true);
    j.advance(800);  // the agent's heartbeat lies unread at the controller
    j.ctl->end(Abort{"stop"});
    j.ctl->close_now();
    j.finish();
    CHECK(j.agent_owner.cause == "controller: closed its connection");
    CHECK(j.agent_owner.text() == "proven | failed controller: closed its connection | closed");
  }
}

TEST_CASE("connection: a reset while open fails both ends with the peer's close") {
  Ends j;
  j.advance(1'000);
  j.ctl_faults->reset();
  j.net.pump();
  CHECK(j.ctl_owner.cause == "h100-a: closed its connection");
  CHECK(j.agent_owner.cause == "controller: closed its connection");
  // Neither end can see the other's end after a reset: each drains until 10 s after the other's
  // last byte, its heartbeat at 800 ms.
  j.advance(9'700);
  CHECK(j.ctl->state() == State::ending);
  CHECK(j.agent->state() == State::ending);
  j.advance(100);
  CHECK(j.since_t0() == 10'800);
  CHECK(j.ctl_owner.closed);
  CHECK(j.agent_owner.closed);
}

TEST_CASE("connection: a write refused with a broken pipe is the peer's close, not a failure") {
  // A peer killed while a large write is under way resets the connection: the writer's next write
  // fails with EPIPE before any read sees the end. Here the controller's side is shut for writes,
  // so its next write (its heartbeat) is refused so.
  Ends j;
  j.advance(1'000);
  j.ctl_faults->shut(Flow::out);
  j.ctl->send(Free{3});
  j.net.pump();
  CHECK(j.ctl_owner.cause == "h100-a: closed its connection");
}

TEST_CASE("connection: a corrupted byte is a malformed message, named by the end that read it") {
  Ends j;
  // The type byte of the controller's next frame, its first heartbeat: 0x01 becomes 0x7f.
  j.ctl_faults->corrupt(Flow::out, j.ctl_end->bytes_sent() + frame_length_field_bytes, 0x01 ^ 0x7f);
  j.advance(800);
  CHECK(j.agent_owner.cause == "controller: malformed message: unknown type 0x7f");
  j.finish();
  CHECK(j.ctl_owner.cause == "h100-a aborted: controller: malformed message: unknown type 0x7f");
}

TEST_CASE("connection: a dial that cannot connect is refused, and the connection closes") {
  ManualClock clock;
  Reactor reactor(clock, 100);
  MemoryNetwork net;
  Owner owner;
  Connection c(reactor, owner, Timing{}, "h100-a");
  const DialerConfig dialer{Role::controller, "controller", new_job_id(), "h100-a",
                            new_instance_id()};
  c.dial(net.unreachable(UV_ECONNREFUSED), Handshake::dialer(the_key(), dialer));
  net.pump();
  CHECK(owner.text() == "refused cannot connect: connection refused | closed");
}

TEST_CASE("connection: a throw inside a callback is the connection's failure, with its text") {
  Ends j;
  j.ctl_liar->armed = true;
  j.advance(800);  // the agent's heartbeat arrives, and the controller's read of it throws
  CHECK(j.ctl_owner.cause ==
        "h100-a: rig: FrameDecoder::commit of 65537 bytes after prepare() gave 65536");
  j.ctl_liar->armed = false;
  j.finish();
  CHECK(j.agent_owner.cause ==
        "controller aborted: h100-a: rig: FrameDecoder::commit of 65537 bytes after prepare() gave "
        "65536");
}

TEST_CASE("connection: a pause of this process is no silence of its peer: read first, then judge") {
  // Both ends share one reactor here, so both pause: 12 s pass between two ticks, and neither end
  // sent anything meanwhile. The tick after the pause gives no verdict; each end's heartbeat then
  // arrives, and the job goes on (libuv runs its timers before its reads: without this, each end
  // would blame the other's silence).
  Ends j;
  j.advance(1'000);
  j.clock.advance(12'000);
  j.reactor.tick_now();
  CHECK(!j.ctl_owner.cause);
  CHECK(!j.agent_owner.cause);
  j.net.pump();
  j.advance(1'000);
  CHECK(j.ctl_owner.text() == "proven");
  CHECK(j.agent_owner.text() == "proven");
  CHECK(j.ctl->state() == State::open);
}

TEST_CASE("connection: at the tick that finds the peer silent, its bytes waiting unread go first") {
  // The controller's end reads nothing for 10 s while its ticks run on, as a loop late by most of
  // the silence runs its timers before its reads (a rail test's agent under TSan, on the scaled 1
  // s, blamed a peer that was running). The agent's heartbeats wait unread: the tick that finds
  // the silence reads them first, and the connection goes on.
  Ends j;
  j.ctl_faults->stall(Flow::in, true);
  j.advance(10'000);
  CHECK(j.ctl_end->unread_bytes() > 0);
  CHECK(!j.ctl_owner.cause);
  j.ctl_faults->stall(Flow::in, false);
  j.net.pump();
  j.advance(1'000);
  CHECK(j.ctl_owner.text() == "proven");
  CHECK(j.ctl->state() == State::open);
  // Put off one tick, not more: with the bytes still unread at the next tick, the verdict stands.
  j.ctl_faults->stall(Flow::in, true);
  j.advance(10'100);
  CHECK(j.since_t0() == 21'100);
  CHECK(j.ctl_owner.cause == "h100-a: sent nothing for 10 s");
}

TEST_CASE("connection: large reads give the loop back once a turn has spent a tick on them") {
  // libuv reads a ready socket up to 32 times before its loop goes on. A rail's destination whose
  // every megabyte took 130 ms to place (TSan, a loaded machine) read for a second with no tick,
  // so sent no heartbeat, and the controller blamed its silence. Here each megabyte takes 60 ms:
  // a turn reads on until it has run a tick (100 ms), then the loop's timers run first.
  Ends j;
  constexpr std::int64_t placing_ms = 60;
  j.agent_owner.placing = [&] { j.clock.advance(placing_ms); };
  const std::vector<std::uint8_t> payload(8 * 1024 * 1024, 0x5a);
  bool done = false;
  j.send_payload(payload, done);
  int turns = 0;
  std::size_t placed_before = 0;
  while (j.agent_owner.bulk_bytes < payload.size() && turns < 100) {
    const std::int64_t t = j.clock.now_ms();
    j.net.pump();
    // A turn stops at its first large read after a tick: at most one frame past it.
    CHECK(j.clock.now_ms() - t <= j.timing.tick_ms + placing_ms);
    CHECK(j.agent_owner.bulk_bytes > placed_before);
    placed_before = j.agent_owner.bulk_bytes;
    j.reactor.tick_now();
    j.reactor.run_soon();
    ++turns;
  }
  CHECK(j.agent_owner.bulk_bytes == payload.size());
  CHECK(turns >= 4);  // 8 frames, at most 2 a turn
  CHECK(done);
  CHECK(j.ctl->state() == State::open);
  CHECK(j.agent->state() == State::open);
  j.advance(1'000);
  CHECK(!j.ctl_owner.cause);
  CHECK(!j.agent_owner.cause);
}

TEST_CASE("connection: a run of large bulk frames is read into place, only its headers copied") {
  // A large copy or rail round comes as 1 MiB frames back to back, each body read straight to its
  // destination. A full-size read for the header after each body took the first 64 KiB of the
  // next body too, which then had to be copied out of the decoder's buffer: a sixteenth of every
  // byte moved twice. Only the first frame's read may do so here, not knowing yet what follows.
  Ends j;
  constexpr std::size_t frames = 8;
  std::vector<std::uint8_t> payload(frames * chunk_bytes);
  for (std::size_t i = 0; i < payload.size(); ++i) {
    payload[i] = static_cast<std::uint8_t>(i * 131 + (i >> 20));
  }
  std::vector<std::uint8_t> placed(payload.size());
  std::size_t sunk = 0;
  j.agent_owner.sink = [&](std::size_t bytes) {
    const auto to = std::span<std::uint8_t>(placed).subspan(sunk, bytes);
    sunk += bytes;
    return to;
  };
  j.agent_liar->recording = true;
  bool done = false;
  j.send_payload(payload, done);
  for (int turn = 0; turn < 1000 && j.agent_owner.placed_bytes < payload.size(); ++turn) {
    j.net.pump();
    j.reactor.run_soon();
  }
  CHECK(done);
  CHECK(j.agent_owner.placed_bytes == payload.size());
  CHECK(j.agent_owner.bulk_bytes == 0);
  CHECK(placed == payload);
  std::size_t copied = 0;  // read into the decoder's buffer: headers, and bodies' first bytes
  for (const auto& r : j.agent_liar->reads) {
    if (r.data() < placed.data() || r.data() >= placed.data() + placed.size()) copied += r.size();
  }
  MESSAGE("bytes read through the decoder's buffer: " << copied);
  CHECK(copied <= 64 * 1024 + frames * 256);
}

TEST_CASE("connection: a peer silent across this process's pause: the cause says it was paused") {
  Ends j;
  j.agent_faults->drop(Flow::out, true);  // the agent's bytes vanish, its heartbeats included
  j.advance(2'000);
  j.clock.advance(12'030);  // this process does not run for 12.03 s
  j.reactor.tick_now();
  j.net.pump();
  CHECK(!j.ctl_owner.cause);  // what came meanwhile is read before any verdict
  j.advance(100);
  CHECK(j.ctl_owner.cause ==
        "h100-a: sent nothing for 10 s, while this process itself was not running for 12 s");
}

TEST_CASE("connection: a dialer that times out says what it lacked: the connection, a greeting") {
  const DialerConfig dialer{Role::controller, "controller", new_job_id(), "h100-a",
                            new_instance_id()};
  // The connection never forms (nothing pumps the network: a SYN that no backlog takes).
  {
    ManualClock clock;
    Reactor reactor(clock, 100);
    MemoryNetwork net;
    Owner owner;
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    Connection c(reactor, owner, Timing{}, "h100-a");
    c.dial(std::move(p.dialer), Handshake::dialer(the_key(), dialer));
    for (int ms = 0; ms < 10'000; ms += 100) {
      CHECK(owner.text().empty());
      clock.advance(100);
      reactor.tick_now();
    }
    net.pump();
    CHECK(owner.text() == "refused cannot connect: no answer within 10 s | closed");
  }
  // Connected, but the agent's process takes no connection: nothing ever greets it.
  {
    ManualClock clock;
    Reactor reactor(clock, 100);
    MemoryNetwork net;
    Owner owner;
    auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
    Connection c(reactor, owner, Timing{}, "h100-a");
    c.dial(std::move(p.dialer), Handshake::dialer(the_key(), dialer));
    net.pump();
    REQUIRE(c.state() == State::handshaking);
    for (int ms = 0; ms < 10'000; ms += 100) {
      clock.advance(100);
      reactor.tick_now();
      net.pump();
    }
    CHECK(owner.text() == "refused sent no greeting within 10 s | closed");
  }
}

TEST_CASE("connection: a stranger refused for garbage hears why and is closed at once, no drain") {
  ManualClock clock;
  Reactor reactor(clock, 100);
  MemoryNetwork net;
  auto p = net.connect("10.0.0.1:50000", "10.0.0.2:4123");
  rig::remote::test::Recorder stranger(512);
  REQUIRE(p.dialer->start(stranger) == 0);
  Owner agent_owner;
  Connection agent(reactor, agent_owner, Timing{}, "a connection");
  REQUIRE(agent.adopt(std::move(p.listener), Handshake::listener(the_key(), {new_instance_id()})) ==
          0);
  net.pump();
  REQUIRE(p.dialer->read_start() == 0);
  // A proof length no proof has, then silence: the stranger never closes its side.
  const std::uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff};
  const Slice s{garbage, sizeof garbage};
  REQUIRE(p.dialer->write({&s, 1}) == 0);
  net.pump();
  // No time has passed: the agent answered with its verdict and closed; it did not wait the drain's
  // 10 s for a peer that will never end its side.
  CHECK(agent_owner.text() ==
        "refused malformed handshake: proof length 4294967295 over the "
        "maximum " +
            std::to_string(proof_body_bytes_max) + " | closed");
  CHECK(agent.state() == State::closed);
  // What the stranger read: the greeting, the verdict (length 1, "malformed"), then the end.
  CHECK(stranger.bytes.size() == greeting_bytes + 5);
  CHECK(stranger.bytes.back() == static_cast<std::uint8_t>(Verdict::malformed));
  CHECK(stranger.log() == "connected 0, end EOF");
  p.dialer->close();
  net.pump();
}

TEST_CASE(
    "connection: send_lazy's message rides on the next write, or goes once the loop is idle") {
  SUBCASE("the next write carries it, before its own message, in one write") {
    Ends j;
    const std::uint64_t writes = j.ctl_end->writes();
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 7});
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");  // held: nothing written
    CHECK(j.ctl_end->writes() == writes);
    j.ctl->send(Free{3});
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | RAIL_COUNT | FREE");
    CHECK(j.ctl_end->writes() == writes + 1);
    // Nothing left to flush once the loop is idle.
    j.reactor.run_soon();
    j.net.pump();
    CHECK(j.ctl_end->writes() == writes + 1);
  }
  SUBCASE("with no other write, the loop's idle moment sends every held message in one write") {
    Ends j;
    const std::uint64_t writes = j.ctl_end->writes();
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 7});
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 8});
    CHECK(j.reactor.run_soon());
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | RAIL_COUNT | RAIL_COUNT");
    CHECK(j.ctl_end->writes() == writes + 1);
  }
  SUBCASE("an end with no final message sends what is held before the half-close") {
    Ends j;
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 7});
    j.ctl->end(std::nullopt);
    j.finish();
    CHECK(j.agent_owner.text().rfind("proven | RAIL_COUNT", 0) == 0);
  }
  SUBCASE("a connection gone before the loop is idle: its held message goes nowhere, harmlessly") {
    Ends j;
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 7});
    j.ctl->close_now();
    j.net.pump();
    j.ctl.reset();
    CHECK(j.reactor.run_soon());  // the queued flush finds the connection gone
    j.finish();
  }
}

TEST_CASE(
    "connection: send_soon of encoded bytes: a turn's messages in one write, caller memory "
    "at once") {
  // Two small messages encoded as a caller does (a SUBMIT's bytes, pieces of them), then a third
  // whose piece lies in caller memory, which cannot be held.
  auto encoded = [](const Message& m) {
    Bytes b;
    encode(m, b);
    return b;
  };
  SUBCASE("held until the turn ends, then one write, in order") {
    Ends j;
    const std::uint64_t writes = j.ctl_end->writes();
    j.ctl->send_soon(encoded(Free{3}), {});
    const Bytes second = encoded(Free{4});
    const Connection::Piece whole[] = {{nullptr, 0, second.size()}};
    j.ctl->send_soon(second, whole);
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");  // held: nothing written yet
    CHECK(j.ctl_end->writes() == writes);
    CHECK(j.reactor.run_soon());
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | FREE | FREE");
    CHECK(j.ctl_end->writes() == writes + 1);
  }
  SUBCASE("a piece in caller memory goes at once, after what is held") {
    Ends j;
    const std::uint64_t writes = j.ctl_end->writes();
    j.ctl->send_soon(encoded(Free{3}), {});
    const Bytes outside = encoded(Free{5});
    const Connection::Piece external[] = {{outside.data(), 0, outside.size()}};
    j.ctl->send_soon(Bytes{}, external);
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | FREE | FREE");
    CHECK(j.ctl_end->writes() == writes + 1);
  }
}

// A caller's write of `bytes` through `lane`, its `before` checked to have run exactly when
// something was written.
namespace {

DirectLane::Outcome write_through(DirectLane& lane, std::span<const std::uint8_t> bytes) {
  int before = 0;
  const auto out = lane.try_write(
      bytes, [](void* c) { ++*static_cast<int*>(c); }, &before);
  CHECK(before == (out.wrote == DirectLane::Wrote::none ? 0 : 1));
  return out;
}

}  // namespace

// News that may wait (send_lazy) on a connection with a DirectLane waits in the lane, which stays
// free for callers: the first write takes it along in front of its own bytes, whoever makes it.
// The lane writes to a socket pair standing in for this connection's socket; the loop's writes go
// over the in-memory pair as usual.
TEST_CASE("connection: news that may wait rides on the next write, a caller's or the loop's") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
  const auto laned = [&](Ends& j) {
    auto lane = std::make_shared<DirectLane>();
    j.ctl->set_direct_lane(lane);
    lane->open(pair[0], nullptr, j.ctl.get());
    lane->release();
    j.ctl->send_lazy(RailCount{1, RailCount::arrived, 3});
    CHECK(lane->carries());
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");  // nothing written for it yet
    return lane;
  };
  Bytes reached;
  encode(Reached{1, 7}, reached);
  SUBCASE("the loop's next message takes it, in front") {
    Ends j;
    const auto lane = laned(j);
    j.ctl->send(Free{5});
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | RAIL_COUNT | FREE");
    CHECK_FALSE(lane->carries());
  }
  SUBCASE("a caller's write takes it, in front of its own bytes; the loop has none left to send") {
    Ends j;
    const auto lane = laned(j);
    const auto out = write_through(*lane, reached);
    CHECK(out.wrote == DirectLane::Wrote::all);
    Bytes count;
    encode(RailCount{1, RailCount::arrived, 3}, count);
    std::vector<std::uint8_t> got(count.size() + reached.size() + 1);
    CHECK(::read(pair[1], got.data(), got.size()) ==
          static_cast<ssize_t>(count.size() + reached.size()));
    CHECK(std::equal(count.begin(), count.end(), got.begin()));
    CHECK(std::equal(reached.begin(), reached.end(),
                     got.begin() + static_cast<std::ptrdiff_t>(count.size())));
    j.reactor.run_soon();  // the loop's idle flush finds nothing held
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");
  }
  SUBCASE("with no write, it goes once the loop is idle") {
    Ends j;
    const auto lane = laned(j);
    j.reactor.run_soon();
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | RAIL_COUNT");
    CHECK_FALSE(lane->carries());
  }
  SUBCASE("a caller's write the kernel took none of: the news, then its rest, from the loop") {
    Ends j;
    const auto lane = laned(j);
    const std::vector<std::uint8_t> filler(64 << 10, 1);
    while (::send(pair[0], filler.data(), filler.size(), MSG_DONTWAIT) > 0) {
    }
    const auto out = write_through(*lane, reached);
    REQUIRE(out.wrote == DirectLane::Wrote::part);
    REQUIRE(out.written == 0);
    // News held after that waits behind the rest, in the connection.
    j.ctl->send_lazy(RailCount{2, RailCount::arrived, 4});
    j.ctl->on_posted_rest(reached);
    j.reactor.run_soon();
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | RAIL_COUNT | REACHED | RAIL_COUNT");
    CHECK_FALSE(lane->rest_due());
  }
  ::close(pair[0]);
  ::close(pair[1]);
}

// A caller's write through the connection's DirectLane that the kernel took only part of (here:
// none of it, on a real socket whose buffers are full, standing in for this connection's): the
// loop writes the rest before anything of its own, and an end in order waits for that rest too.
TEST_CASE("connection: after a caller's partial write, the loop's writes wait for its rest") {
  int full[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, full) == 0);
  const std::vector<std::uint8_t> filler(64 << 10, 1);
  while (::send(full[0], filler.data(), filler.size(), MSG_DONTWAIT) > 0) {
  }
  Bytes rest;
  encode(Reached{1, 7}, rest);
  const auto partial = [&](Ends& j) {
    auto lane = std::make_shared<DirectLane>();
    j.ctl->set_direct_lane(lane);
    lane->open(full[0], nullptr);
    lane->release();
    const auto out = write_through(*lane, rest);
    REQUIRE(out.wrote == DirectLane::Wrote::part);
    REQUIRE(out.written == 0);
    return lane;
  };
  SUBCASE("a message the loop sends meanwhile goes after the rest") {
    Ends j;
    const auto lane = partial(j);
    j.ctl->send(Free{5});
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");  // held behind the rest
    j.ctl->write_rest(rest);
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven | REACHED | FREE");
    CHECK_FALSE(lane->rest_due());
  }
  SUBCASE("an end with an ABORT sends the rest, then the abort, then ends the stream") {
    Ends j;
    const auto lane = partial(j);
    j.ctl->end(Abort{"stop"});
    j.net.pump();
    CHECK(j.agent_owner.text() == "proven");
    j.ctl->write_rest(rest);
    j.finish();
    CHECK(j.agent_owner.text() == "proven | REACHED | abort stop | closed");
    CHECK_FALSE(lane->rest_due());
  }
  ::close(full[0]);
  ::close(full[1]);
}
