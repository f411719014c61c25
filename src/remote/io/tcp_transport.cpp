#include "remote/io/tcp_transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "remote/io/address.hpp"
#include "remote/io/guard.hpp"

namespace rig::remote {

TcpTransport::TcpTransport(uv_loop_t* loop, std::int64_t user_timeout_ms)
    : loop_(loop), user_timeout_ms_(user_timeout_ms) {}

std::unique_ptr<TcpTransport> TcpTransport::dial(uv_loop_t* loop, const sockaddr* address,
                                                 std::int64_t user_timeout_ms) {
  std::unique_ptr<TcpTransport> t(new TcpTransport(loop, user_timeout_ms));
  t->dialing_ = true;
  const std::size_t n = address->sa_family == AF_INET6  ? sizeof(sockaddr_in6)
                        : address->sa_family == AF_INET ? sizeof(sockaddr_in)
                                                        : sizeof(sockaddr);
  std::memcpy(&t->address_, address, n);
  return t;
}

std::unique_ptr<TcpTransport> TcpTransport::adopt(uv_loop_t* loop, int fd,
                                                  std::int64_t user_timeout_ms) {
  std::unique_ptr<TcpTransport> t(new TcpTransport(loop, user_timeout_ms));
  t->fd_ = fd;
  return t;
}

TcpTransport::~TcpTransport() {
  // A transport that never started still owns its socket; a started one gave it to the handle,
  // whose close (which its owner waits for) closed it.
  if (fd_ >= 0) ::close(fd_);
}

int TcpTransport::start(TransportEvents& events) {
  events_ = &events;
  // uv_tcp_init only allocates nothing and cannot fail for AF_UNSPEC; a failure would be libuv's
  // bug, and there would be no handle whose close could report on_closed.
  if (uv_tcp_init(loop_, &tcp_) != 0) throw std::logic_error("rig: uv_tcp_init failed");
  tcp_.data = this;
  handle_open_ = true;
  if (dialing_) {
    connect_req_.data = this;
    return uv_tcp_connect(&connect_req_, &tcp_, reinterpret_cast<const sockaddr*>(&address_),
                          on_connect);
  }
  const int fd = fd_;
  fd_ = -1;
  const int rc = uv_tcp_open(&tcp_, fd);
  if (rc != 0) {
    ::close(fd);  // the handle never took it, so its close would not
    return rc;
  }
  tune_socket();
  return 0;
}

void TcpTransport::tune_socket() {
  uv_tcp_nodelay(&tcp_, 1);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) == 0) {
    // The kernel's backstop: unacknowledged data older than this ends the connection even if the
    // loop were stuck. Above every rig deadline, so rig's own cause always comes first.
    const unsigned int ms = static_cast<unsigned int>(user_timeout_ms_);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
  }
}

void TcpTransport::report_throw(const std::string& what) noexcept {
  if (events_ != nullptr) events_->on_transport_error(what);
}

void TcpTransport::on_connect(uv_connect_t* req, int status) noexcept {
  auto* t = static_cast<TcpTransport*>(req->data);
  guard(
      [&] {
        if (status == 0) t->tune_socket();
        t->events_->on_connected(status);
      },
      [t](const std::string& what) { t->report_throw(what); });
}

int TcpTransport::read_start() {
  return uv_read_start(stream(), on_alloc, on_read);
}

void TcpTransport::read_stop() {
  uv_read_stop(stream());
}

void TcpTransport::on_alloc(uv_handle_t* h, std::size_t suggested, uv_buf_t* buf) noexcept {
  auto* t = static_cast<TcpTransport*>(h->data);
  *buf = uv_buf_init(nullptr, 0);  // libuv reports UV_ENOBUFS for an empty buffer
  guard(
      [&] {
        const auto space = t->events_->read_buffer(suggested);
        *buf =
            uv_buf_init(reinterpret_cast<char*>(space.data()), static_cast<unsigned>(space.size()));
      },
      [t](const std::string& what) { t->report_throw(what); });
}

void TcpTransport::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) noexcept {
  auto* t = static_cast<TcpTransport*>(s->data);
  guard(
      [&] {
        if (n >= 0) {
          t->events_->on_read(static_cast<std::size_t>(n));
          return;
        }
        uv_read_stop(s);
        t->events_->on_read_end(static_cast<int>(n));
      },
      [t](const std::string& what) { t->report_throw(what); });
}

int TcpTransport::write(std::span<const Slice> slices) {
  bufs_.clear();
  std::size_t total = 0;
  for (const Slice& s : slices) {
    if (s.bytes == 0) continue;
    bufs_.push_back(uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(s.data)),
                                static_cast<unsigned>(s.bytes)));
    total += s.bytes;
  }
  if (bufs_.empty()) return 0;  // libuv takes no write of nothing
  std::size_t first = 0;
  if (writes_pending_ == 0) {
    // The fast path: straight into the socket, one syscall, no request and no epoll change.
    const int rc = uv_try_write(stream(), bufs_.data(), static_cast<unsigned>(bufs_.size()));
    if (rc < 0 && rc != UV_EAGAIN) return rc;
    std::size_t written = rc > 0 ? static_cast<std::size_t>(rc) : 0;
    if (written == total) return 0;
    // Skip what went out; the rest goes through a request.
    while (written >= bufs_[first].len) written -= bufs_[first++].len;
    bufs_[first].base += written;
    bufs_[first].len -= static_cast<unsigned>(written);
  }
  std::unique_ptr<WriteRequest> w;
  if (spare_requests_.empty()) {
    w = std::make_unique<WriteRequest>();
  } else {
    w = std::move(spare_requests_.back());
    spare_requests_.pop_back();
  }
  w->transport = this;
  w->req.data = w.get();
  const int rc = uv_write(&w->req, stream(), bufs_.data() + first,
                          static_cast<unsigned>(bufs_.size() - first), on_write);
  if (rc != 0) {
    spare_requests_.push_back(std::move(w));
    return rc;
  }
  w.release();  // on_write takes it back
  ++writes_pending_;
  return write_queued;
}

void TcpTransport::on_write(uv_write_t* req, int status) noexcept {
  std::unique_ptr<WriteRequest> w(static_cast<WriteRequest*>(req->data));
  TcpTransport* t = w->transport;
  --t->writes_pending_;
  guard([&] { t->spare_requests_.push_back(std::move(w)); }, [](const std::string&) {});
  guard([&] { t->events_->on_written(status); },
        [t](const std::string& what) { t->report_throw(what); });
}

int TcpTransport::shutdown() {
  shutdown_req_.data = this;
  return uv_shutdown(&shutdown_req_, stream(), on_shutdown);
}

void TcpTransport::on_shutdown(uv_shutdown_t* req, int status) noexcept {
  auto* t = static_cast<TcpTransport*>(req->data);
  guard([&] { t->events_->on_shutdown(status); },
        [t](const std::string& what) { t->report_throw(what); });
}

void TcpTransport::close() {
  if (!handle_open_) return;
  handle_open_ = false;
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_close);
}

void TcpTransport::on_close(uv_handle_t* h) noexcept {
  auto* t = static_cast<TcpTransport*>(h->data);
  // on_closed may destroy the transport: nothing of it is touched after.
  guard([t] { t->events_->on_closed(); }, [](const std::string&) {});
}

void TcpTransport::reset() {
  uv_os_fd_t fd;
  if (!handle_open_ || uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) != 0) return;
  sockaddr none{};
  none.sa_family = AF_UNSPEC;
  ::connect(fd, &none, sizeof none);
}

int TcpTransport::native_fd() const noexcept {
  uv_os_fd_t fd = -1;
  if (!handle_open_ || uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return -1;
  return fd;
}

std::size_t TcpTransport::queued_bytes() const noexcept {
  if (!handle_open_) return 0;
  return uv_stream_get_write_queue_size(reinterpret_cast<const uv_stream_t*>(&tcp_));
}

bool TcpTransport::send_state(TcpSendState& out) const noexcept {
  uv_os_fd_t fd;
  return handle_open_ && uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) == 0 &&
         tcp_send_state(fd, out);
}

std::size_t TcpTransport::unread_bytes() const noexcept {
  uv_os_fd_t fd;
  if (!handle_open_ || uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return 0;
  return tcp_unread_bytes(fd);
}

std::string TcpTransport::peer_address() const {
  if (!handle_open_) return "?";
  sockaddr_storage a{};
  int len = sizeof a;
  if (uv_tcp_getpeername(&tcp_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return sockaddr_text(a);
}

}  // namespace rig::remote
