#include "remote/io/direct_lane.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

namespace rig::remote {

DirectLane::Outcome DirectLane::try_write(std::span<const std::uint8_t> bytes,
                                          void (*before)(void*), void* context) noexcept {
  const std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || state_ != State::free || bytes.empty()) return {};
  before(context);
  iovec parts[2];
  int count = 0;
  if (!carried_.empty()) parts[count++] = {carried_.data(), carried_.size()};
  parts[count++] = {const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = static_cast<std::size_t>(count);
  ssize_t n;
  do {
    n = ::sendmsg(fd_, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  // An error (a full socket, or a broken one) wrote nothing: the loop writes it all, and meets the
  // error itself if there is one, as it would have without the lane.
  std::size_t written = n > 0 ? static_cast<std::size_t>(n) : 0;
  if (counts_ != nullptr && written > 0) {
    counts_->sent_bytes.fetch_add(written, std::memory_order_relaxed);
  }
  // The news went first: what of it the kernel took is gone from the lane, and the rest of it
  // stays for the loop's write of the caller's rest, in front of it.
  const std::size_t news = std::min(written, carried_.size());
  carried_.erase(carried_.begin(), carried_.begin() + static_cast<std::ptrdiff_t>(news));
  written -= news;
  if (written == bytes.size()) return {Wrote::all, written};
  state_ = State::rest_due;
  return {Wrote::part, written};
}

void DirectLane::open(int fd, ConnectionCounters::Role* counts, Connection* connection) noexcept {
  const std::lock_guard lock(mu_);
  fd_ = fd;
  counts_ = counts;
  connection_ = connection;
  state_ = fd >= 0 ? State::loop : State::closed;
  close_after_rest_ = false;
}

bool DirectLane::claim(Bytes* carried) noexcept {
  const std::lock_guard lock(mu_);
  if (state_ == State::free) state_ = State::loop;
  if (state_ == State::rest_due) return true;
  if (carried != nullptr) move_carried(*carried);
  return false;
}

void DirectLane::move_carried(Bytes& out) noexcept {
  if (carried_.empty()) return;
  if (out.empty()) {
    out.swap(carried_);  // the usual case: no copy, no allocation
    return;
  }
  try {
    out.insert(out.end(), carried_.begin(), carried_.end());
    carried_.clear();
  } catch (...) {
    // No memory to join them: the news stays here, for the next write.
  }
}

bool DirectLane::carry(std::span<const std::uint8_t> news) noexcept {
  const std::lock_guard lock(mu_);
  if (state_ != State::free && state_ != State::loop) return false;
  try {
    carried_.insert(carried_.end(), news.begin(), news.end());
  } catch (...) {
    return false;  // no memory for it here: the connection keeps it
  }
  return true;
}

bool DirectLane::carries() const noexcept {
  const std::lock_guard lock(mu_);
  return !carried_.empty();
}

void DirectLane::release() noexcept {
  const std::lock_guard lock(mu_);
  if (state_ == State::loop) state_ = State::free;
}

bool DirectLane::rest_due() const noexcept {
  const std::lock_guard lock(mu_);
  return state_ == State::rest_due;
}

void DirectLane::take_carried(Bytes& out) noexcept {
  const std::lock_guard lock(mu_);
  move_carried(out);
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
  if (!keep_rest) {
    connection_ = nullptr;
    carried_.clear();
  }
}

}  // namespace rig::remote
