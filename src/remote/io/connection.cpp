#include "remote/io/connection.hpp"

#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "core/pool.hpp"
#include "remote/io/counters.hpp"
#include "remote/io/guard.hpp"
#include "remote/io/tcp_transport.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {

namespace {

// Where a proven connection's traffic is counted (counters.hpp), by its peer's role; null when
// counting is off or the connection has not proven the key.
ConnectionCounters::Role* counted(const std::optional<Handshake>& hs) {
  ConnectionCounters* c = connection_counters();
  if (c == nullptr || !hs || hs->state() != Handshake::State::proven) return nullptr;
  return hs->peer().role == Role::controller ? &c->controller : &c->agent;
}

// A listener's connection refused in its handshake: counted by why.
void count_refusal(const Handshake& hs, bool timed_out) {
  ConnectionCounters* c = connection_counters();
  if (c == nullptr || !hs.listening()) return;
  std::atomic<std::uint64_t>* field = nullptr;
  if (timed_out) {
    field = &c->handshakes_timed_out;
  } else if (const auto& v = hs.verdict_sent()) {
    field = *v == Verdict::wrong_key   ? &c->handshakes_wrong_key
            : *v == Verdict::malformed ? &c->handshakes_malformed
                                       : &c->connections_refused;
  }
  if (field != nullptr) field->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace
namespace {

// What a read asks libuv for at a time, once the peer has proven the key.
constexpr std::size_t read_chunk_bytes = 64 * 1024;
// What a read asks for before then: a handshake's messages are small (a proof at most
// proof_body_bytes_max, read in a few pieces), and a connection that has not proven the key must
// cost next to nothing (docs/security.md, "Strangers"), so the full-size buffers wait for the
// proof.
constexpr std::size_t handshake_read_bytes = 512;
// A bulk frame's body at least this large, not all received yet, is read straight to where its
// owner puts it; a smaller one goes through the decoder's buffer, where one copy costs little.
constexpr std::size_t sink_bytes_min = 16 * 1024;
// The most one read into a sink asks for (libuv's buffer length is an unsigned int).
constexpr std::size_t sink_read_bytes_max = 16 * 1024 * 1024;
// What the read after a sink's last byte asks for. A large transfer comes as a run of bulk frames,
// so the next bytes are usually the next frame's header: a full-size read there would take the
// first read_chunk_bytes of its body through the decoder's buffer, to be copied out again (a
// sixteenth of a 1 MiB chunk, and the cache it evicts). This much holds the headers between two
// chunks of a rail round or a copy; libuv reads again at once when a read fills its buffer, by then
// into the next sink.
constexpr std::size_t after_sink_read_bytes = 256;

std::string uv_text(int code) {
  return uv_strerror(code);
}

}  // namespace

std::string seconds_text(std::int64_t ms) {
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  std::string frac = std::to_string(ms % 1000);
  frac.insert(0, 3 - frac.size(), '0');
  while (frac.back() == '0') frac.pop_back();
  return std::to_string(ms / 1000) + "." + frac + " s";
}

Connection::Connection(Reactor& reactor, ConnectionOwner& owner, const Timing& timing,
                       std::string peer_name)
    : reactor_(reactor),
      owner_(owner),
      timing_(timing),
      peer_name_(std::move(peer_name)),
      liveness_(timing, reactor.now_ms()),
      started_ms_(reactor.now_ms()) {
  ticker_ = reactor_.add_ticker([this](std::int64_t now) {
    guard([&] { tick(now); }, [this](const std::string& what) { thrown(what); });
  });
}

Connection::~Connection() {
  // The owner destroys a connection only after on_closed, or a reactor tears down without running
  // (then the transport's handle was never started, or the loop's close reclaims it).
  if (ticker_ != 0) reactor_.remove_ticker(ticker_);
  // In the second case the handle never closed: a rest posted later must not find this connection.
  if (lane_) lane_->close(false);
  *self_ = nullptr;
}

void Connection::dial(const sockaddr* address, Handshake hs) {
  dial(TcpTransport::dial(reactor_.loop(), address, timing_.tcp_user_timeout_ms), std::move(hs));
}

int Connection::adopt(int fd, Handshake hs) {
  return adopt(TcpTransport::adopt(reactor_.loop(), fd, timing_.tcp_user_timeout_ms),
               std::move(hs));
}

void Connection::dial(std::unique_ptr<Transport> transport, Handshake hs) {
  if (transport_ || !transport || !transport->dialing()) {
    throw std::invalid_argument("rig: Connection::dial needs a dialing transport, once");
  }
  transport_ = std::move(transport);
  handshake_.emplace(std::move(hs));
  state_ = State::connecting;
  const int rc = transport_->start(*this);
  handle_open_ = true;
  if (rc != 0) {
    owner_.on_refused(*this, "cannot connect: " + uv_text(rc));
    close_handle();
  }
}

int Connection::adopt(std::unique_ptr<Transport> transport, Handshake hs) {
  if (transport_ || !transport || transport->dialing()) {
    throw std::invalid_argument("rig: Connection::adopt needs a connected transport, once");
  }
  transport_ = std::move(transport);
  handshake_.emplace(std::move(hs));
  const int rc = transport_->start(*this);
  handle_open_ = true;
  if (rc != 0) {
    close_handle();
    return rc;
  }
  start();
  return 0;
}

void Connection::thrown(const std::string& what) noexcept {
  switch (state_) {
    case State::connecting:
    case State::handshaking:
      owner_.on_refused(*this, what);
      close_handle();
      return;
    case State::open:
      fail(peer_name_ + ": " + what);
      return;
    case State::ending:
      close_handle();
      return;
    default:
      return;
  }
}

void Connection::on_transport_error(const std::string& what) noexcept {
  thrown(what);
}

void Connection::on_connected(int status) noexcept {
  guard(
      [&] {
        if (state_ != State::connecting) return;  // closed while the connect was pending
        if (status != 0) {
          owner_.on_refused(*this, "cannot connect: " + uv_text(status));
          close_handle();
          return;
        }
        start();
      },
      [this](const std::string& what) { thrown(what); });
}

void Connection::start() {
  state_ = State::handshaking;
  started_ms_ = reactor_.now_ms();
  liveness_.received(started_ms_);
  const int rc = transport_->read_start();
  if (rc != 0) {
    owner_.on_refused(*this, "cannot read: " + uv_text(rc));
    close_handle();
    return;
  }
  flush_handshake();  // a listener's greeting
}

std::span<std::uint8_t> Connection::read_buffer(std::size_t) noexcept {
  std::span<std::uint8_t> out;
  guard(
      [&] {
        if (state_ == State::open && !sink_.empty()) {
          const std::size_t n = std::min(sink_.size() - sink_done_, sink_read_bytes_max);
          out = sink_.subspan(sink_done_, n);
          return;
        }
        if (state_ == State::open) {
          out = decoder_.prepare(after_sink_ ? after_sink_read_bytes : read_chunk_bytes);
          return;
        }
        // Not open: proving the key, or ending (what arrives is discarded). A stranger gets the
        // small buffer; a connection that was open drains through the large one.
        const bool proven = handshake_ && handshake_->state() == Handshake::State::proven;
        handshake_buf_.resize(proven ? read_chunk_bytes : handshake_read_bytes);
        out = handshake_buf_;
      },
      [this](const std::string& what) { thrown(what); });
  return out;
}

void Connection::on_read(std::size_t bytes) noexcept {
  guard([&] { received(bytes); }, [this](const std::string& what) { thrown(what); });
}

void Connection::received(std::size_t bytes) {
  if (bytes == 0) {
    if (state_ == State::open) decoder_.commit(0);
    return;
  }
  liveness_.received(reactor_.now_ms());
  if (auto* r = counted(handshake_)) {
    r->received_bytes.fetch_add(bytes, std::memory_order_relaxed);
    r->last_received_ms.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count(),
                              std::memory_order_relaxed);
  }
  switch (state_) {
    case State::handshaking:
      handshake_bytes({handshake_buf_.data(), bytes});
      // The handshake keeps what it needs of the bytes (and the decoder what followed a proof):
      // a stranger that sent a few bytes and waits holds no read buffer.
      handshake_buf_ = {};
      return;
    case State::open:
      share_turn(bytes);
      if (!sink_.empty()) {
        sink_done_ += bytes;
        if (sink_done_ < sink_.size()) return;
        const std::size_t placed = sink_.size();
        sink_ = {};
        after_sink_ = true;
        reactor_.note_activity();
        owner_.on_bulk_placed(*this, sink_type_, placed);
        return;
      }
      after_sink_ = false;
      decoder_.commit(bytes);
      frame_bytes();
      return;
    default:
      return;  // ending: what arrives now is read only so that the close resets nothing
  }
}

void Connection::share_turn(std::size_t bytes) {
  // Small reads cost little each, and a clock read apiece would tax the round trips they carry.
  if (bytes < sink_bytes_min || reads_yielded_) return;
  if (reactor_.turn_ran_ms() < timing_.tick_ms) return;
  // This read is handled still; the bytes after it wait in the socket for the next turn.
  reads_yielded_ = true;
  transport_->read_stop();
  reactor_.soon([self = self_] {
    Connection* c = *self;
    if (c == nullptr) return;
    c->reads_yielded_ = false;
    if (c->state_ != State::open && c->state_ != State::ending) return;
    guard(
        [&] {
          const int rc = c->transport_->read_start();
          if (rc != 0) c->fail(c->peer_name_ + ": cannot read: " + uv_text(rc));
        },
        [c](const std::string& what) { c->thrown(what); });
  });
}

void Connection::on_read_end(int status) noexcept {
  guard([&] { read_ended(status); }, [this](const std::string& what) { thrown(what); });
}

void Connection::read_ended(int status) {
  if (state_ == State::open) decoder_.commit(0);
  const bool eof = status == UV_EOF;
  peer_ended_ = eof;
  switch (state_) {
    case State::handshaking:
      handshake_->end_of_input();
      owner_.on_refused(*this,
                        handshake_->done() && handshake_->state() == Handshake::State::refused
                            ? handshake_->why()
                            : "closed the connection during the handshake");
      close_handle();
      return;
    case State::open:
      // A reset is the peer's close too (with our bytes unread, or by its process's death).
      fail(peer_name_ + (eof || status == UV_ECONNRESET
                             ? ": closed its connection"
                             : ": connection failed: " + uv_text(status)));
      return;
    case State::ending:
      // The peer has ended its side too (or the connection broke): close once our own final
      // bytes have left, which the shutdown's completion tells.
      if (!eof || shutdown_done_) close_handle();
      return;
    default:
      return;
  }
}

void Connection::handshake_bytes(std::span<const std::uint8_t> bytes) {
  Handshake& hs = *handshake_;
  const std::size_t used = hs.feed(bytes);
  if (hs.state() == Handshake::State::verified) hs.admit(owner_.serving_job(*this));
  flush_handshake();
  if (hs.state() == Handshake::State::refused) {
    count_refusal(hs, false);
    owner_.on_refused(*this, hs.why());
    // Let the verdict reach the dialer before the close, so its error can say why: the close
    // follows once it has gone to the kernel (on_shutdown). A dialer that was refused sends
    // nothing more, so nothing of it is left unread to turn that close into a reset; a stranger
    // that goes on sending is reset, and holds nothing of this agent for a drain.
    refused_ = true;
    end(std::nullopt);
    return;
  }
  if (hs.state() != Handshake::State::proven) return;
  state_ = State::open;
  open_lane();
  if (end_when_proven_) {
    // The job ended while this connection was proving the key: the peer is in the job now, so it
    // hears how the job ended.
    end(final_when_proven_);
    return;
  }
  owner_.on_proven(*this);
  if (state_ != State::open) return;
  if (used < bytes.size()) {
    decoder_.feed(bytes.subspan(used));
    frame_bytes();
  }
}

void Connection::flush_handshake() {
  auto out = handshake_->take_output();
  if (!out.empty()) write_buffers(Bytes(out.begin(), out.end()), {}, nullptr);
}

void Connection::frame_bytes(bool fresh) {
  while (state_ == State::open) {
    auto next = decoder_.next();
    if (!next) {
      fail(peer_name_ + ": " + next.error());
      return;
    }
    if (!next->has_value()) return try_sink();
    if (is_bulk((*next)->type)) {
      // Bulk bytes go to the job as they lie in the decoder's buffer: no decoding, no copy.
      owner_.on_bulk(*this, (*next)->type, (*next)->body);
      continue;
    }
    auto message = decode(**next);
    if (!message) {
      fail(peer_name_ + ": " + message.error());
      return;
    }
    if (auto* r = counted(handshake_)) r->received_messages.fetch_add(1, std::memory_order_relaxed);
    if (std::holds_alternative<Heartbeat>(*message)) continue;  // liveness already noted the bytes
    // A message of the job's work: its answer or the next one usually follows at once.
    if (fresh) reactor_.note_activity();
    owner_.on_message(*this, std::move(*message));
  }
}

void Connection::try_sink() {
  const auto partial = decoder_.partial_bulk();
  if (!partial || partial->body_bytes < sink_bytes_min) return;
  const auto to = owner_.bulk_sink(*this, partial->type, partial->body_bytes);
  if (to.size() != partial->body_bytes) return;
  std::memcpy(to.data(), partial->buffered.data(), partial->buffered.size());
  sink_ = to;
  sink_done_ = partial->buffered.size();
  sink_type_ = partial->type;
  decoder_.skip_partial_bulk();
}

void Connection::send(const Message& m) {
  if (state_ != State::open) return;  // ending or closed: nothing more may follow
  Bytes bytes;
  encode(m, bytes);
  if (auto* r = counted(handshake_)) r->sent_messages.fetch_add(1, std::memory_order_relaxed);
  write_buffers(std::move(bytes), {}, nullptr);
}

void Connection::send_lazy(const Message& m) {
  hold_news(m, &Connection::lazy_flush_queued_, &Reactor::when_idle);
}

void Connection::send_later(const Message& m) {
  hold_news(m, &Connection::later_flush_queued_, &Reactor::after_news_delay);
}

void Connection::hold_news(const Message& m, bool Connection::*queued,
                           void (Reactor::*flush_at)(std::function<void()>)) {
  if (state_ != State::open) return;
  if (lane_) {
    // In the lane, the news leaves with whichever write comes first, a caller's included, and
    // leaves the lane free meanwhile. A lane that takes none (closed, a rest due) leaves it here.
    Bytes news;
    encode(m, news);
    if (lane_->carry(news)) {
      if (auto* r = counted(handshake_)) r->sent_messages.fetch_add(1, std::memory_order_relaxed);
      flush_held_at(queued, flush_at);
      return;
    }
  }
  hold(m, queued, flush_at);
}

void Connection::send_soon(const Message& m) {
  hold(m, &Connection::soon_flush_queued_, &Reactor::at_turn_end);
}

void Connection::send_soon_covering(const Message& m, std::uint64_t key) {
  if (state_ != State::open) return;
  if (covering_end_ != 0 && covering_end_ == lazy_.size() && covering_key_ == key) {
    lazy_.resize(covering_at_);  // it was counted once, when it was held
    encode(m, lazy_);
    covering_end_ = lazy_.size();
    return;  // a flush is queued already: the one held was
  }
  covering_at_ = lazy_.size();
  hold(m, &Connection::soon_flush_queued_, &Reactor::at_turn_end);
  covering_end_ = lazy_.size();
  covering_key_ = key;
}

void Connection::send_soon(Bytes owned, std::span<const Piece> pieces) {
  if (state_ != State::open) return;
  (void)claim_lane();
  if (std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) { return p.external; })) {
    return send_pieces(std::move(owned), pieces, nullptr);
  }
  if (pieces.empty()) {
    lazy_.insert(lazy_.end(), owned.begin(), owned.end());
  } else {
    for (const Piece& p : pieces) {
      const auto from = owned.begin() + static_cast<std::ptrdiff_t>(p.offset);
      lazy_.insert(lazy_.end(), from, from + static_cast<std::ptrdiff_t>(p.bytes));
    }
  }
  flush_held_at(&Connection::soon_flush_queued_, &Reactor::at_turn_end);
}

void Connection::hold(const Message& m, bool Connection::*queued,
                      void (Reactor::*flush_at)(std::function<void()>)) {
  if (state_ != State::open) return;
  (void)claim_lane();
  encode(m, lazy_);
  if (auto* r = counted(handshake_)) r->sent_messages.fetch_add(1, std::memory_order_relaxed);
  flush_held_at(queued, flush_at);
}

void Connection::flush_held_at(bool Connection::*queued,
                               void (Reactor::*flush_at)(std::function<void()>)) {
  if (this->*queued) return;
  this->*queued = true;
  (reactor_.*flush_at)([self = self_, queued] {
    if (Connection* c = *self) {
      c->*queued = false;
      guard([&] { c->flush_lazy(); }, [c](const std::string& what) { c->thrown(what); });
    }
  });
}

bool Connection::holds_news() const noexcept {
  return !lazy_.empty() || (lane_ && lane_->carries());
}

void Connection::flush_lazy() {
  if (state_ != State::open || !holds_news()) return;
  write_buffers({}, {}, nullptr);
}

void Connection::send_gather(std::span<const std::uint8_t> head,
                             std::span<const std::uint8_t> payload, std::function<void()> done) {
  if (state_ != State::open) {
    if (done) done();
    return;
  }
  const Piece pieces[] = {{nullptr, 0, head.size()}, {payload.data(), 0, payload.size()}};
  write_buffers({head.begin(), head.end()}, pieces, std::move(done));
}

void add_bulk_frames(Bytes& owned, rig::detail::PoolVector<Connection::Piece>& pieces,
                     std::uint8_t type, std::span<const std::uint8_t> bytes) {
  for (std::size_t at = 0; at < bytes.size(); at += chunk_bytes) {
    const std::size_t n = std::min(chunk_bytes, bytes.size() - at);
    const std::size_t header = owned.size();
    owned.resize(header + frame_header_bytes);
    write_frame_header(
        std::span<std::uint8_t, frame_header_bytes>(owned.data() + header, frame_header_bytes),
        type, n);
    pieces.push_back({nullptr, header, frame_header_bytes});
    pieces.push_back({bytes.data() + at, 0, n});
  }
}

void Connection::send_pieces(Bytes owned, std::span<const Piece> pieces,
                             std::function<void()> done) {
  if (state_ != State::open) {
    if (done) done();
    return;
  }
  write_buffers(std::move(owned), pieces, std::move(done));
}

void Connection::write_buffers(Bytes owned, std::span<const Piece> pieces,
                               std::function<void()> done) {
  // What send_lazy held goes first (in the lane, or here): news that could wait rides on this
  // write.
  Bytes lazy;
  const bool rest_due = lane_ && lane_->claim(&lazy);
  if (lazy.empty()) {
    lazy = std::move(lazy_);
  } else {
    lazy.insert(lazy.end(), lazy_.begin(), lazy_.end());
  }
  lazy_.clear();
  covering_end_ = 0;  // what was held is on its way: nothing after it replaces it
  if (rest_due) {
    // A caller's message is partly on the wire: nothing may go before its rest (write_rest).
    deferred_.push_back({std::move(lazy),
                         std::move(owned),
                         {pieces.begin(), pieces.end()},
                         std::move(done),
                         final_message_pending_});
    final_message_pending_ = false;
    return;
  }
  write_now(std::move(lazy), std::move(owned), pieces, std::move(done));
  release_lane_if_idle();
}

void Connection::write_rest(Bytes rest) {
  if (!handle_open_ || (state_ != State::open && state_ != State::ending)) return;
  // What the caller's write left of the news it carried goes first: it was in front of the rest.
  Bytes news;
  if (lane_) lane_->take_carried(news);
  write_now(std::move(news), std::move(rest), {}, nullptr);
  if (lane_) lane_->rest_written();
  while (!deferred_.empty() && handle_open_) {
    Deferred d = std::move(deferred_.front());
    deferred_.pop_front();
    final_message_pending_ = d.final_message;
    write_now(std::move(d.lazy), std::move(d.owned), d.pieces, std::move(d.done));
  }
  if (shutdown_after_rest_ && handle_open_) {
    shutdown_after_rest_ = false;
    if (transport_->shutdown() != 0) close_handle();
    return;
  }
  release_lane_if_idle();
}

void Connection::set_direct_lane(std::shared_ptr<DirectLane> lane) {
  lane_ = std::move(lane);
  if (state_ == State::open) open_lane();
}

void Connection::open_lane() noexcept {
  if (!lane_) return;
  lane_->open(transport_->native_fd(), counted(handshake_), this);
  release_lane_if_idle();
}

std::shared_ptr<ReadLane> Connection::read_lane() {
  if (!read_lane_ && handle_open_ && state_ == State::open) {
    read_lane_ = ReadLane::open(transport_->native_fd(), reactor_, counted(handshake_), this);
    // The lane outlives this, but calls back only while its connection_ is set (until close).
    if (read_lane_) read_lane_->on_back([this] { on_read_lane_back(); });
  }
  return read_lane_;
}

bool Connection::lend_reads(std::uint64_t key, std::shared_ptr<void> holder) {
  // Only at a frame's boundary, with nothing of the peer's bytes held here: the reader starts at
  // the socket's next byte, which begins a frame.
  if (!read_lane_ || reads_lent_ || state_ != State::open || !handle_open_ || !sink_.empty() ||
      reads_yielded_ || decoder_.buffered_bytes() != 0) {
    return false;
  }
  transport_->read_stop();
  reads_lent_ = true;
  read_lane_->lend(key, std::move(holder));
  arm_read_watch();
  return true;
}

void Connection::arm_read_watch() {
  if (read_watch_armed_) return;
  read_watch_armed_ = true;
  reactor_.after_ms(read_lane_watch_ms, [self = self_] {
    if (Connection* c = *self) {
      c->read_watch_armed_ = false;
      guard([&] { c->watch_reads(); }, [c](const std::string& what) { c->thrown(what); });
    }
  });
}

void Connection::watch_reads() {
  if (!read_lane_) return;
  if (read_lane_->take_bytes_read() > 0) liveness_.received(reactor_.now_ms());
  // The owner reports what readers took: here, at most read_lane_watch_ms late, and not at every
  // return of the lane, whose report would ride in front of the next round the other way and send
  // the peer's lane back in turn, round after round.
  if (read_lane_watch_) read_lane_watch_();
  if (!reads_lent_) return;
  // Frames readers passed on: handled here as if read now. The decoder holds nothing while the
  // socket is lent, and they are whole.
  Bytes deferred;
  read_lane_->take_deferred(deferred);
  if (!deferred.empty() && state_ == State::open) {
    decoder_.feed(deferred);
    // Old news: the loop does not poll for it. A host-code ping-pong on one core gave each
    // agent's loop 0.08 turns a round, mostly the polls after each watch, and 0.015 without them
    // (bench/README.md, "Session 29 on a lent H100").
    frame_bytes(false);
    if (!reads_lent_ || !read_lane_) return;
  }
  const ReadLane::State st = read_lane_->state();
  // Bytes wait and nobody reads them (host code is not waiting now), or a reader gave the lane
  // back and its post found no memory: the loop reads on.
  if (st == ReadLane::State::returning ||
      (st == ReadLane::State::lent &&
       (read_lane_->holds_bytes() || transport_->unread_bytes() > 0))) {
    take_reads_back();
  }
  if (reads_lent_) arm_read_watch();
}

void Connection::take_reads_back() {
  if (!reads_lent_) return;
  Bytes left;
  // Never from a reader at it: the watch saw the lane lent, but a reader may have claimed it
  // since, and one cut off inside a chunk's body would leave the decoder the body's rest.
  if (read_lane_->take_back_idle(left)) reads_back(std::move(left));
}

void Connection::on_read_lane_back() noexcept {
  guard([&] { take_reads_back(); }, [this](const std::string& what) { thrown(what); });
}

void Connection::reads_back(Bytes left) {
  reads_lent_ = false;
  if (read_lane_->take_bytes_read() > 0) liveness_.received(reactor_.now_ms());
  // What readers took is reported by the watch's next look (or by the owner's own handling of
  // the frames that follow).
  arm_read_watch();
  if (!handle_open_ || (state_ != State::open && state_ != State::ending)) return;
  const int rc = transport_->read_start();
  if (rc != 0) return fail(peer_name_ + ": cannot read: " + uv_text(rc));
  if (state_ == State::open && !left.empty()) {
    decoder_.feed(left);
    frame_bytes();
  }
}

void Connection::on_posted_rest(Bytes rest) noexcept {
  guard([&] { write_rest(std::move(rest)); }, [this](const std::string& what) { thrown(what); });
}

void Connection::release_lane_if_idle() noexcept {
  if (lane_ && state_ == State::open && writes_.empty() && lazy_.empty() && deferred_.empty()) {
    lane_->release();
  }
}

void Connection::write_now(Bytes lazy, Bytes owned, std::span<const Piece> pieces,
                           std::function<void()> done) {
  slices_.clear();
  if (!lazy.empty()) slices_.push_back({lazy.data(), lazy.size()});
  if (pieces.empty() && !owned.empty()) slices_.push_back({owned.data(), owned.size()});
  for (const Piece& piece : pieces) {
    slices_.push_back(
        {piece.external != nullptr ? piece.external : owned.data() + piece.offset, piece.bytes});
  }
  const std::int64_t now = reactor_.now_ms();
  const bool final_message = final_message_pending_;
  final_message_pending_ = false;
  // The transport writes at once what it can (over TCP one writev, no request) and queues the rest.
  if (auto* r = counted(handshake_)) {
    std::uint64_t total = 0;
    for (const auto& slice : slices_) total += slice.bytes;
    r->sent_bytes.fetch_add(total, std::memory_order_relaxed);
  }
  if (read_lane_) read_lane_->loop_writing();
  const int rc = transport_->write(slices_);
  if (read_lane_) read_lane_->loop_wrote();
  if (rc < 0) {
    if (done) done();
    broken(rc);
    return;
  }
  if (rc != write_queued) {
    liveness_.sent(now);
    if (final_message) ended_ms_ = now;
    if (done) done();
    return;
  }
  // Moving the vector keeps its buffer where it is, so the slices still point at the right bytes.
  writes_.push_back({std::move(owned), std::move(done), final_message, std::move(lazy)});
  if (writes_.size() == 1 && sending_watch_) sending_watch_(true);
  liveness_.backlog(now);
}

void Connection::on_written(int status) noexcept {
  guard([&] { written(status); }, [this](const std::string& what) { thrown(what); });
}

void Connection::written(int status) {
  if (writes_.empty()) return;  // a transport's bug; nothing waits for it
  Write w = std::move(writes_.front());
  writes_.pop_front();
  if (read_lane_) read_lane_->loop_finished_write();
  if (writes_.empty() && sending_watch_) sending_watch_(false);
  release_lane_if_idle();
  const std::int64_t now = reactor_.now_ms();
  liveness_.sent(now);
  liveness_.progress(now, !writes_.empty());
  if (w.final_message) ended_ms_ = now;
  if (w.done) w.done();
  if (status != 0 && status != UV_ECANCELED) broken(status);
}

void Connection::broken(int code) {
  switch (state_) {
    case State::handshaking:
      owner_.on_refused(*this, "connection failed: " + uv_text(code));
      close_handle();
      return;
    case State::open:
      // A write refused for a reset (EPIPE once the peer's RST came, ECONNRESET as it comes) is
      // the peer's close, as the reader names it (read_ended): a peer killed mid-write is
      // named the same whichever side of the connection notices first (docs/failure.md).
      fail(peer_name_ + (code == UV_EPIPE || code == UV_ECONNRESET
                             ? ": closed its connection"
                             : ": connection failed: " + uv_text(code)));
      return;
    case State::ending:
      close_handle();
      return;  // nothing more can be said on it
    default:
      return;
  }
}

std::string Connection::peer_address() const {
  return transport_ ? transport_->peer_address() : "?";
}

std::size_t Connection::backlog_bytes() const noexcept {
  return transport_ ? transport_->queued_bytes() : 0;
}

void Connection::tick(std::int64_t now) {
  if (!transport_) return;  // not dialed or adopted yet
  liveness_.ticked(now);
  if (reads_lent_ && read_lane_->take_bytes_read() > 0) liveness_.received(now);
  switch (state_) {
    case State::connecting:
    case State::handshaking:
      // After a pause of this process the peer's greeting or proof may be waiting unread.
      if (now - started_ms_ >= timing_.handshake_timeout_ms && !liveness_.resuming(now)) {
        if (handshake_) count_refusal(*handshake_, true);
        owner_.on_refused(*this, handshake_timeout_text());
        close_handle();
      }
      return;
    case State::open: {
      // Progress is what the peer acknowledges: bytes waiting in the kernel count as much as
      // those still queued here, so a peer that stops reading is caught whatever we send.
      const std::size_t backlog = backlog_bytes();
      TcpSendState kernel{0, 0};
      const bool known = transport_->send_state(kernel);
      const bool waiting = backlog > 0 || !writes_.empty() || kernel.queued_bytes > 0;
      if (known && kernel.acked_bytes != last_acked_) {
        last_acked_ = kernel.acked_bytes;
        liveness_.progress(now, waiting);
      } else if (!known && backlog < last_backlog_) {
        liveness_.progress(now, waiting);
      } else if (waiting) {
        liveness_.backlog(now);
      } else {
        liveness_.settled();
      }
      last_backlog_ = backlog;
      const Liveness::Verdict verdict = liveness_.check(now);
      if (verdict != Liveness::Verdict::silent) silence_spared_ = false;
      switch (verdict) {
        case Liveness::Verdict::fine:
          return;
        case Liveness::Verdict::send_heartbeat:
          send(Heartbeat{});
          return;
        case Liveness::Verdict::silent: {
          // The peer's bytes wait unread: libuv runs its timers before its reads, so a loop late
          // by most of the silence (a loaded machine, a sanitizer's build on scaled 1 s times,
          // short of a pause) would blame a peer whose heartbeats it has not read yet. They are
          // read in this very turn; the next tick judges, and judges then whatever waits.
          if (!silence_spared_ && transport_->unread_bytes() > 0) {
            silence_spared_ = true;
            return;
          }
          std::string cause =
              peer_name_ + ": sent nothing for " + seconds_text(timing_.silence_timeout_ms);
          // The silence fell (partly) in this process's own pause: say so, to the tenth of a
          // second.
          const std::int64_t paused = liveness_.paused_since(liveness_.last_received_ms());
          if (paused > 0) {
            cause += ", while this process itself was not running for " +
                     seconds_text(paused / 100 * 100);
          }
          fail(cause);
          return;
        }
        case Liveness::Verdict::stalled:
          fail(peer_name_ + ": a send made no progress for " +
               seconds_text(timing_.send_stall_timeout_ms));
          return;
      }
      return;
    }
    case State::ending:
      drain_check(now);
      return;
    default:
      return;
  }
}

// A dialer knows how far the listener got: an agent whose process takes no connection (stopped,
// busy ending its last job, its backlog full) never greets, and the key is then not the question.
std::string Connection::handshake_timeout_text() const {
  const std::string within = " within " + seconds_text(timing_.handshake_timeout_ms);
  if (state_ == State::connecting) return "cannot connect: no answer" + within;
  if (handshake_->state() == Handshake::State::awaiting_greeting) {
    return "sent no greeting" + within;
  }
  return "no proof of the key" + within;
}

void Connection::fail(const std::string& cause) {
  if (state_ != State::open) return;
  owner_.on_failed(*this, cause);
  // The owner ends every connection of a failed job, this one included; make sure of it.
  if (state_ == State::open) end(std::nullopt);
}

void Connection::end(const std::optional<Message>& final_message) {
  if (state_ == State::ending || state_ == State::closing || state_ == State::closed) return;
  if (state_ == State::connecting) {
    close_handle();
    return;
  }
  if (state_ == State::handshaking && final_message) {
    end_when_proven_ = true;
    final_when_proven_ = final_message;
    return;
  }
  const bool was_open = state_ == State::open;
  ended_ms_ = reactor_.now_ms();
  // No caller writes from now on; one whose rest is due gets it written, before the final message.
  if (lane_) lane_->close(true);
  // The drain reads here: a reader gives the socket back, and what it left goes unread, as what
  // arrives from now on does.
  if (reads_lent_) {
    Bytes left;
    if (read_lane_->take_back(left)) {
      reads_lent_ = false;
      if (transport_->read_start() != 0) {
        close_handle();
        return;
      }
    }
  }
  if (was_open && !final_message && holds_news()) {
    flush_lazy();
    if (state_ != State::open) return;  // the write failed and closed the connection
  }
  if (was_open && final_message) {
    Bytes bytes;
    encode(*final_message, bytes);
    final_message_pending_ = true;
    write_buffers(std::move(bytes), {}, nullptr);
    if (state_ != State::open) return;  // the write failed and closed the connection
  }
  state_ = State::ending;
  if (lane_ && lane_->rest_due()) {
    shutdown_after_rest_ = true;  // write_rest shuts down once the rest and what waited have gone
    return;
  }
  if (transport_->shutdown() != 0) close_handle();
}

void Connection::on_shutdown(int) noexcept {
  // Our side is ended once every queued write has gone; if the peer's has too, nothing is left.
  guard(
      [&] {
        shutdown_done_ = true;
        if ((peer_ended_ || refused_) && state_ == State::ending) close_handle();
      },
      [this](const std::string& what) { thrown(what); });
}

void Connection::drain_check(std::int64_t now) {
  if (now - ended_ms_ >= timing_.drain_timeout_ms ||
      now - liveness_.last_received_ms() >= timing_.silence_timeout_ms) {
    close_handle();
  }
}

void Connection::close_now() {
  close_handle();
}

void Connection::turn_away() {
  if (state_ == State::handshaking && handshake_->state() == Handshake::State::awaiting_proof) {
    handshake_->turn_away();
    flush_handshake();  // over TCP the few bytes go to the kernel now, before the close
  }
  close_handle();
}

void Connection::close_handle() {
  if (!handle_open_) return;
  handle_open_ = false;
  if (lane_) lane_->close(false);
  if (read_lane_) {
    read_lane_->close();
    read_lane_.reset();
    reads_lent_ = false;
  }
  // What waited behind a caller's rest goes nowhere now; its owners learn it is done.
  while (!deferred_.empty()) {
    Deferred d = std::move(deferred_.front());
    deferred_.pop_front();
    if (d.done) d.done();
  }
  state_ = State::closing;
  if (ticker_ != 0) {
    reactor_.remove_ticker(ticker_);
    ticker_ = 0;
  }
  transport_->close();
}

void Connection::on_closed() noexcept {
  state_ = State::closed;
  owner_.on_closed(*this);  // may destroy this
}

namespace {

// A caller's rest on its way to the loop. Owner: the poster, then the loop, which frees it once
// run. From the block pool, as its bytes are.
struct RestCommand final : Command {
  std::shared_ptr<DirectLane> lane;
  Bytes rest;
  void run(Reactor&) noexcept override {
    // Loop thread, where the connection clears itself from the lane as it closes.
    Connection* c = lane->connection();
    Bytes bytes = std::move(rest);
    std::shared_ptr<DirectLane> keep = std::move(lane);
    this->~RestCommand();
    rig::detail::pool_release(this, sizeof(RestCommand));
    if (c != nullptr) c->on_posted_rest(std::move(bytes));
  }
};

}  // namespace

bool post_rest(Reactor& reactor, std::shared_ptr<DirectLane> lane,
               std::span<const std::uint8_t> rest) noexcept {
  try {
    void* at = rig::detail::pool_allocate(sizeof(RestCommand));
    auto* command = new (at) RestCommand();
    command->lane = std::move(lane);
    try {
      command->rest.assign(rest.begin(), rest.end());
    } catch (...) {
      command->~RestCommand();
      rig::detail::pool_release(at, sizeof(RestCommand));
      return false;
    }
    reactor.post(command);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace rig::remote
