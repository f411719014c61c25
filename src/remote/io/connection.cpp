#include "remote/io/connection.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "remote/io/address.hpp"
#include "remote/io/tcp_state.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {
namespace {

// What a read asks libuv for at a time.
constexpr std::size_t read_chunk_bytes = 64 * 1024;
// A bulk frame's body at least this large, not all received yet, is read straight to where its
// owner puts it; a smaller one goes through the decoder's buffer, where one copy costs little.
constexpr std::size_t sink_bytes_min = 16 * 1024;
// The most one read into a sink asks for (libuv's buffer length is an unsigned int).
constexpr std::size_t sink_read_bytes_max = 16 * 1024 * 1024;

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

struct Connection::Write {
  uv_write_t req{};
  Connection* conn = nullptr;
  Bytes owned;
  std::function<void()> done;
  bool final_message = false;
};

Connection::Connection(Reactor& reactor, ConnectionOwner& owner, const Timing& timing,
                       std::string peer_name)
    : reactor_(reactor),
      owner_(owner),
      timing_(timing),
      peer_name_(std::move(peer_name)),
      liveness_(timing, reactor.now_ms()),
      started_ms_(reactor.now_ms()) {
  uv_tcp_init(reactor_.loop(), &tcp_);
  tcp_.data = this;
  handle_open_ = true;
  ticker_ = reactor_.add_ticker([this](std::int64_t now) { tick(now); });
}

Connection::~Connection() {
  // The owner destroys a connection only after on_closed, or a reactor tears down without running
  // (then nothing was ever opened beyond the handle, which the loop's close reclaims).
  if (ticker_ != 0) reactor_.remove_ticker(ticker_);
}

void Connection::dial(const sockaddr* address, Handshake hs) {
  handshake_.emplace(std::move(hs));
  state_ = State::connecting;
  connect_req_.data = this;
  const int rc = uv_tcp_connect(&connect_req_, &tcp_, address, on_connect);
  if (rc != 0) {
    owner_.on_refused(*this, "cannot connect: " + uv_text(rc));
    close_handle();
  }
}

int Connection::adopt(int fd, Handshake hs) {
  handshake_.emplace(std::move(hs));
  const int rc = uv_tcp_open(&tcp_, fd);
  if (rc != 0) {
    ::close(fd);  // the handle never took it, so its close would not
    close_handle();
    return rc;
  }
  start();
  return 0;
}

void Connection::on_connect(uv_connect_t* req, int status) {
  auto* c = static_cast<Connection*>(req->data);
  if (c->state_ != State::connecting) return;  // closed while the connect was pending
  if (status != 0) {
    c->owner_.on_refused(*c, "cannot connect: " + uv_text(status));
    c->close_handle();
    return;
  }
  c->start();
}

void Connection::start() {
  state_ = State::handshaking;
  started_ms_ = reactor_.now_ms();
  liveness_.received(started_ms_);
  tune_socket();
  const int rc = uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp_), on_alloc, on_read);
  if (rc != 0) {
    owner_.on_refused(*this, "cannot read: " + uv_text(rc));
    close_handle();
    return;
  }
  flush_handshake();  // a listener's greeting
}

void Connection::tune_socket() {
  uv_tcp_nodelay(&tcp_, 1);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) == 0) {
    // The kernel's backstop: unacknowledged data older than this ends the connection even if the
    // loop were stuck. Above every rig deadline, so rig's own cause always comes first.
    const unsigned int ms = static_cast<unsigned int>(timing_.tcp_user_timeout_ms);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
  }
}

void Connection::on_alloc(uv_handle_t* h, std::size_t, uv_buf_t* buf) {
  auto* c = static_cast<Connection*>(h->data);
  if (c->state_ == State::open && !c->sink_.empty()) {
    const std::size_t n = std::min(c->sink_.size() - c->sink_done_, sink_read_bytes_max);
    *buf = uv_buf_init(reinterpret_cast<char*>(c->sink_.data() + c->sink_done_),
                       static_cast<unsigned>(n));
    return;
  }
  if (c->state_ == State::open) {
    const auto space = c->decoder_.prepare(read_chunk_bytes);
    *buf = uv_buf_init(reinterpret_cast<char*>(space.data()), static_cast<unsigned>(space.size()));
    return;
  }
  c->handshake_buf_.resize(read_chunk_bytes);
  *buf = uv_buf_init(reinterpret_cast<char*>(c->handshake_buf_.data()),
                     static_cast<unsigned>(c->handshake_buf_.size()));
}

void Connection::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
  auto* c = static_cast<Connection*>(s->data);
  if (n == 0) {
    if (c->state_ == State::open) c->decoder_.commit(0);
    return;
  }
  const std::int64_t now = c->reactor_.now_ms();
  if (n < 0) {
    if (c->state_ == State::open) c->decoder_.commit(0);
    const bool eof = n == UV_EOF;
    c->peer_ended_ = eof;
    uv_read_stop(s);
    switch (c->state_) {
      case State::handshaking:
        c->handshake_->end_of_input();
        c->owner_.on_refused(
            *c, c->handshake_->done() && c->handshake_->state() == Handshake::State::refused
                    ? c->handshake_->why()
                    : "closed the connection during the handshake");
        c->close_handle();
        return;
      case State::open:
        // A reset is the peer's close too (with our bytes unread, or by its process's death).
        c->fail(c->peer_name_ + (eof || n == UV_ECONNRESET
                                     ? ": closed its connection"
                                     : ": connection failed: " + uv_text(static_cast<int>(n))));
        return;
      case State::ending:
        // The peer has ended its side too (or the connection broke): close once our own final
        // bytes have left, which the shutdown's completion tells.
        if (!eof || c->shutdown_done_) c->close_handle();
        return;
      default:
        return;
    }
  }
  c->liveness_.received(now);
  const auto bytes = static_cast<std::size_t>(n);
  switch (c->state_) {
    case State::handshaking:
      c->handshake_bytes({reinterpret_cast<const std::uint8_t*>(buf->base), bytes});
      return;
    case State::open:
      if (!c->sink_.empty()) {
        c->sink_done_ += bytes;
        if (c->sink_done_ < c->sink_.size()) return;
        const std::size_t placed = c->sink_.size();
        c->sink_ = {};
        c->reactor_.note_activity();
        c->owner_.on_bulk_placed(*c, c->sink_type_, placed);
        return;
      }
      c->decoder_.commit(bytes);
      c->frame_bytes();
      return;
    default:
      return;  // ending: what arrives now is read only so that the close resets nothing
  }
}

void Connection::handshake_bytes(std::span<const std::uint8_t> bytes) {
  Handshake& hs = *handshake_;
  const std::size_t used = hs.feed(bytes);
  if (hs.state() == Handshake::State::verified) hs.admit(owner_.serving_job(*this));
  flush_handshake();
  if (hs.state() == Handshake::State::refused) {
    owner_.on_refused(*this, hs.why());
    // Let the verdict reach the dialer before the close, so its error can say why.
    end(std::nullopt);
    return;
  }
  if (hs.state() != Handshake::State::proven) return;
  state_ = State::open;
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

void Connection::frame_bytes() {
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
    if (std::holds_alternative<Heartbeat>(*message)) continue;  // liveness already noted the bytes
    // A message of the job's work: its answer or the next one usually follows at once.
    reactor_.note_activity();
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
  write_buffers(std::move(bytes), {}, nullptr);
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
  auto* stream = reinterpret_cast<uv_stream_t*>(&tcp_);
  std::vector<uv_buf_t> bufs;
  bufs.reserve(pieces.empty() ? 1 : pieces.size());
  auto add = [&bufs](const std::uint8_t* p, std::size_t n) {
    if (n > 0) {
      bufs.push_back(uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(p)),
                                 static_cast<unsigned>(n)));
    }
  };
  if (pieces.empty()) add(owned.data(), owned.size());
  for (const Piece& piece : pieces) {
    add(piece.external != nullptr ? piece.external : owned.data() + piece.offset, piece.bytes);
  }
  const std::int64_t now = reactor_.now_ms();
  const bool final_message = final_message_pending_;
  final_message_pending_ = false;
  std::size_t first = 0;
  if (writes_pending_ == 0) {
    // The fast path: straight into the socket, one syscall, no request and no epoll change.
    const int rc = uv_try_write(stream, bufs.data(), static_cast<unsigned>(bufs.size()));
    std::size_t written = rc > 0 ? static_cast<std::size_t>(rc) : 0;
    if (rc < 0 && rc != UV_EAGAIN) {
      if (done) done();
      broken(rc);
      return;
    }
    std::size_t total = 0;
    for (const uv_buf_t& b : bufs) total += b.len;
    if (written == total) {
      liveness_.sent(now);
      if (final_message) ended_ms_ = now;
      if (done) done();
      return;
    }
    // Skip what went out; the rest goes through a request.
    while (written >= bufs[first].len) written -= bufs[first++].len;
    bufs[first].base += written;
    bufs[first].len -= static_cast<unsigned>(written);
  }
  auto* w = new Write();
  w->conn = this;
  w->done = std::move(done);
  w->final_message = final_message;
  // Moving the vector keeps its buffer where it is, so bufs still point at the right bytes.
  w->owned = std::move(owned);
  w->req.data = w;
  const int rc = uv_write(&w->req, stream, bufs.data() + first,
                          static_cast<unsigned>(bufs.size() - first), on_write);
  if (rc != 0) {
    if (w->done) w->done();
    delete w;
    broken(rc);
    return;
  }
  if (writes_pending_++ == 0 && sending_watch_) sending_watch_(true);
  liveness_.backlog(now);
}

void Connection::on_write(uv_write_t* req, int status) {
  auto* w = static_cast<Write*>(req->data);
  Connection* c = w->conn;
  if (--c->writes_pending_ == 0 && c->sending_watch_) c->sending_watch_(false);
  const std::int64_t now = c->reactor_.now_ms();
  c->liveness_.sent(now);
  c->liveness_.progress(now, c->writes_pending_ > 0);
  if (w->final_message) c->ended_ms_ = now;
  if (w->done) w->done();
  delete w;
  if (status != 0 && status != UV_ECANCELED) c->broken(status);
}

void Connection::broken(int code) {
  switch (state_) {
    case State::handshaking:
      owner_.on_refused(*this, "connection failed: " + uv_text(code));
      close_handle();
      return;
    case State::open:
      fail(peer_name_ + ": connection failed: " + uv_text(code));
      return;
    case State::ending:
      close_handle();
      return;  // nothing more can be said on it
    default:
      return;
  }
}

std::string Connection::peer_address() const {
  sockaddr_storage a{};
  int len = sizeof a;
  if (uv_tcp_getpeername(&tcp_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return sockaddr_text(a);
}

std::size_t Connection::backlog_bytes() const noexcept {
  return uv_stream_get_write_queue_size(reinterpret_cast<const uv_stream_t*>(&tcp_));
}

void Connection::tick(std::int64_t now) {
  switch (state_) {
    case State::connecting:
    case State::handshaking:
      if (now - started_ms_ >= timing_.handshake_timeout_ms) {
        owner_.on_refused(
            *this, "no proof of the key within " + seconds_text(timing_.handshake_timeout_ms));
        close_handle();
      }
      return;
    case State::open: {
      // Progress is what the peer acknowledges: bytes waiting in the kernel count as much as
      // those still queued here, so a peer that stops reading is caught whatever we send.
      const std::size_t backlog = backlog_bytes();
      uv_os_fd_t fd;
      TcpSendState kernel{0, 0};
      const bool known = uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) == 0 &&
                         tcp_send_state(fd, kernel);
      const bool waiting = backlog > 0 || writes_pending_ > 0 || kernel.queued_bytes > 0;
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
      switch (liveness_.check(now)) {
        case Liveness::Verdict::fine:
          return;
        case Liveness::Verdict::send_heartbeat:
          send(Heartbeat{});
          return;
        case Liveness::Verdict::silent:
          fail(peer_name_ + ": sent nothing for " + seconds_text(timing_.silence_timeout_ms));
          return;
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
  if (was_open && final_message) {
    Bytes bytes;
    encode(*final_message, bytes);
    final_message_pending_ = true;
    write_buffers(std::move(bytes), {}, nullptr);
    if (state_ != State::open) return;  // the write failed and closed the connection
  }
  state_ = State::ending;
  shutdown_req_.data = this;
  if (uv_shutdown(&shutdown_req_, reinterpret_cast<uv_stream_t*>(&tcp_), on_shutdown) != 0) {
    close_handle();
  }
}

void Connection::on_shutdown(uv_shutdown_t* req, int) {
  // Our side is ended once every queued write has gone; if the peer's has too, nothing is left.
  auto* c = static_cast<Connection*>(req->data);
  c->shutdown_done_ = true;
  if (c->peer_ended_ && c->state_ == State::ending) c->close_handle();
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

void Connection::close_handle() {
  if (!handle_open_) return;
  handle_open_ = false;
  state_ = State::closing;
  if (ticker_ != 0) {
    reactor_.remove_ticker(ticker_);
    ticker_ = 0;
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_close);
}

void Connection::on_close(uv_handle_t* h) {
  auto* c = static_cast<Connection*>(h->data);
  c->state_ = State::closed;
  c->owner_.on_closed(*c);  // may destroy c
}

}  // namespace rig::remote
