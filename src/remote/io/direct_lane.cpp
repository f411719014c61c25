#include "remote/io/direct_lane.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace rig::remote {

DirectLane::Outcome DirectLane::try_write(std::span<const std::uint8_t> bytes,
                                          void (*before)(void*), void* context) noexcept {
  const std::lock_guard lock(mu_);
  if (state_ != State::free || bytes.empty()) return {};
  before(context);
  ssize_t n;
  do {
    n = ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  // An error (a full socket, or a broken one) wrote nothing: the loop writes it all, and meets the
  // error itself if there is one, as it would have without the lane.
  const std::size_t written = n > 0 ? static_cast<std::size_t>(n) : 0;
  if (counts_ != nullptr && written > 0) {
    counts_->sent_bytes.fetch_add(written, std::memory_order_relaxed);
  }
  if (written == bytes.size()) return {Wrote::all, written};
  state_ = State::rest_due;
  return {Wrote::part, written};
}

void DirectLane::open(int fd, ConnectionCounters::Role* counts) noexcept {
  const std::lock_guard lock(mu_);
  fd_ = fd;
  counts_ = counts;
  state_ = fd >= 0 ? State::loop : State::closed;
  close_after_rest_ = false;
}

bool DirectLane::claim() noexcept {
  const std::lock_guard lock(mu_);
  if (state_ == State::free) state_ = State::loop;
  return state_ == State::rest_due;
}

void DirectLane::release() noexcept {
  const std::lock_guard lock(mu_);
  if (state_ == State::loop) state_ = State::free;
}

bool DirectLane::rest_due() const noexcept {
  const std::lock_guard lock(mu_);
  return state_ == State::rest_due;
}

void DirectLane::rest_written() noexcept {
  const std::lock_guard lock(mu_);
  if (state_ != State::rest_due) return;
  state_ = close_after_rest_ ? State::closed : State::loop;
}

void DirectLane::close(bool keep_rest) noexcept {
  const std::lock_guard lock(mu_);
  if (keep_rest && state_ == State::rest_due) {
    close_after_rest_ = true;
    return;
  }
  state_ = State::closed;
}

}  // namespace rig::remote
