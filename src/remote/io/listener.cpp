#include "remote/io/listener.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "remote/io/guard.hpp"

namespace rig::remote {

AcceptError classify_accept_error(int err) noexcept {
  switch (err) {
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR:
      return AcceptError::wait;
    // Linux hands a taken connection's pending network error to accept(2) itself (accept(2),
    // "Error handling"): that connection is gone, the listener is fine.
    case ECONNABORTED:
    case EPROTO:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETDOWN:
    case ENETUNREACH:
    case ETIMEDOUT:
    case EPERM:  // a firewall rule refused that connection
      return AcceptError::next;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return AcceptError::retry_later;
    default:
      return AcceptError::fatal;
  }
}

Listener::Listener(uv_loop_t* loop, int fd, Events events)
    : loop_(loop), fd_(fd), events_(std::move(events)) {}

Listener::~Listener() {
  // stop() hands the handles to the loop to close; a listener that never started only has its
  // descriptor to give back.
  if (!poll_open_ && !timer_open_ && fd_ >= 0) ::close(fd_);
}

int Listener::start() {
  int rc = uv_timer_init(loop_, &retry_);
  if (rc == 0) {
    timer_open_ = true;
    retry_.data = this;
    // uv_poll_init_socket also makes the socket non-blocking, which accept_some relies on.
    rc = uv_poll_init_socket(loop_, &poll_, fd_);
  }
  if (rc == 0) {
    poll_open_ = true;
    poll_.data = this;
    rc = uv_poll_start(&poll_, UV_READABLE, on_readable);
  }
  if (rc != 0) stop();
  return rc;
}

void Listener::stop() {
  if (poll_open_) {
    poll_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
  }
  if (timer_open_) {
    timer_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&retry_), nullptr);
  }
  // Closed only now that nothing polls it (libuv's rule for poll handles).
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Listener::on_readable(uv_poll_t* handle, int status, int) noexcept {
  auto* self = static_cast<Listener*>(handle->data);
  guard(
      [self, status] {
        if (status < 0) {
          // The socket itself is in error (POLLERR): no accept will succeed on it.
          self->stop();
          self->events_.failed(uv_strerror(status));
          return;
        }
        self->accept_some();
      },
      [self](const std::string& why) { self->threw(why); });
}

void Listener::on_retry(uv_timer_t* handle) noexcept {
  auto* self = static_cast<Listener*>(handle->data);
  guard(
      [self] {
        self->accept_some();
        // Still short, stopped, or failed: nothing more to do here. Otherwise the poll takes over
        // again.
        if (!self->short_ && self->poll_open_) {
          uv_poll_start(&self->poll_, UV_READABLE, on_readable);
        }
      },
      [self](const std::string& why) { self->threw(why); });
}

void Listener::threw(const std::string& why) noexcept {
  // What the job did with a connection (or an error of ours) threw: listening ends, and the job
  // fails with the exception's text.
  stop();
  events_.failed(why);
}

bool Listener::connection_waiting() const {
  pollfd p{fd_, POLLIN, 0};
  const int n = ::poll(&p, 1, 0);
  return n != 0;  // an error says nothing: take it that one waits
}

void Listener::accept_some() {
  for (int i = 0; i < accepts_per_turn_max && fd_ >= 0; ++i) {
    const int s = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) {
      short_ = false;
      events_.accepted(s);  // may stop this listener
      continue;
    }
    const int err = errno;
    switch (classify_accept_error(err)) {
      case AcceptError::wait:
        short_ = false;
        return;
      case AcceptError::next:
        continue;
      case AcceptError::retry_later: {
        // Linux takes the descriptor before it looks at the backlog, so a process at its limit
        // fails this way after every accept, whether a connection waits or not: only one that
        // waits calls for room (or a retry); otherwise the poll wakes the listener when one comes.
        if (!connection_waiting()) {
          short_ = false;
          return;
        }
        // A descriptor (or the memory of a connection) given back makes the next accept succeed:
        // the connection waiting is taken in this turn. Bounded by accepts_per_turn_max like
        // every other accept.
        if (events_.make_room && events_.make_room(err)) continue;
        // The connection stays in the backlog; polling now would report it again at once, so the
        // poll rests and a timer tries again.
        uv_poll_stop(&poll_);
        uv_timer_start(&retry_, on_retry, accept_retry_ms, 0);
        const bool began = !short_;
        short_ = true;
        if (began) events_.short_of_resources(err);
        return;
      }
      case AcceptError::fatal:
        stop();
        events_.failed(std::strerror(err));
        return;
    }
  }
}

}  // namespace rig::remote
