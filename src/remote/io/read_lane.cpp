#include "remote/io/read_lane.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "core/pool.hpp"
#include "core/spin.hpp"
#include "remote/limits.hpp"

namespace rig::remote {

// A reader's news for the loop: a request to lend (`key`), or the lane given back. Owner: the
// poster, then the loop, which frees it once run. From the block pool, as the rails' posts are.
struct ReadLaneCommand final : Command {
  std::shared_ptr<ReadLane> lane;
  bool back = false;
  std::uint64_t key = 0;
  void run(Reactor&) noexcept override {
    std::shared_ptr<ReadLane> keep = std::move(lane);
    const bool given_back = back;
    const std::uint64_t k = key;
    this->~ReadLaneCommand();
    rig::detail::pool_release(this, sizeof(ReadLaneCommand));
    // Loop thread, where the connection clears itself from the lane as it closes.
    if (given_back) {
      if (keep->connection_ != nullptr && keep->on_back_) keep->on_back_();
      return;
    }
    keep->requested_.store(false, std::memory_order_release);
    if (keep->connection_ != nullptr && keep->on_request_) keep->on_request_(k);
  }
};

namespace {

bool post(Reactor& reactor, std::shared_ptr<ReadLane> lane, bool back, std::uint64_t key) noexcept {
  void* at = nullptr;
  try {
    at = rig::detail::pool_allocate(sizeof(ReadLaneCommand));
  } catch (...) {
    return false;
  }
  if (at == nullptr) return false;
  auto* command = new (at) ReadLaneCommand();
  command->lane = std::move(lane);
  command->back = back;
  command->key = key;
  reactor.post(command);
  return true;
}

}  // namespace

std::shared_ptr<ReadLane> ReadLane::open(int fd, Reactor& reactor, ConnectionCounters::Role* counts,
                                         Connection* connection) {
  if (fd < 0) return nullptr;
  std::shared_ptr<ReadLane> lane(new ReadLane(reactor));
  lane->fd_ = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  lane->wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (lane->fd_ < 0 || lane->wake_ < 0) return nullptr;  // the destructor closes what was made
  lane->counts_ = counts;
  lane->connection_ = connection;
  return lane;
}

ReadLane::~ReadLane() {
  close_descriptors();
}

void ReadLane::lend(std::uint64_t key, std::shared_ptr<void> holder) {
  std::shared_ptr<void> drop = std::move(holder);
  std::lock_guard lock(mu_);
  if (state_ != State::loop) return;
  std::uint64_t drained = 0;
  while (::read(wake_, &drained, sizeof drained) > 0) {
  }
  wanted_back_.store(false, std::memory_order_release);
  key_ = key;
  holder_ = std::move(drop);
  deferred_.clear();
  bytes_.clear();
  taken_ = 0;
  state_ = State::lent;
}

void ReadLane::take_back_locked(Bytes& out, std::shared_ptr<void>& drop) {
  out.insert(out.end(), deferred_.begin(), deferred_.end());
  deferred_.clear();
  out.insert(out.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(taken_), bytes_.end());
  bytes_.clear();
  taken_ = 0;
  drop = std::move(holder_);
  state_ = State::loop;
}

bool ReadLane::take_back_idle(Bytes& out) {
  std::shared_ptr<void> drop;  // let go of after the lock: it may hold the last of this lane
  std::lock_guard lock(mu_);
  if (state_ == State::reading) return false;
  if (state_ == State::lent || state_ == State::returning) take_back_locked(out, drop);
  return true;
}

bool ReadLane::take_back(Bytes& out) {
  std::shared_ptr<void> drop;  // let go of after the lock: it may hold the last of this lane
  std::lock_guard lock(mu_);
  switch (state_) {
    case State::lent:
    case State::returning:
      take_back_locked(out, drop);
      return true;
    case State::reading: {
      wanted_back_.store(true, std::memory_order_release);
      const std::uint64_t one = 1;
      (void)!::write(wake_, &one, sizeof one);
      return false;
    }
    case State::loop:
    case State::closed:
      return true;
  }
  return true;
}

void ReadLane::want_back() {
  std::lock_guard lock(mu_);
  if (state_ != State::reading) return;
  wanted_back_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
}

void ReadLane::defer(std::size_t n) {
  std::lock_guard lock(mu_);
  deferred_.insert(deferred_.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(taken_),
                   bytes_.begin() + static_cast<std::ptrdiff_t>(taken_ + n));
  taken_ += n;
}

void ReadLane::take_deferred(Bytes& out) {
  std::lock_guard lock(mu_);
  out.insert(out.end(), deferred_.begin(), deferred_.end());
  deferred_.clear();
}

ReadLane::State ReadLane::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

bool ReadLane::holds_bytes() const {
  std::lock_guard lock(mu_);
  return state_ == State::lent && taken_ < bytes_.size();
}

void ReadLane::close() {
  std::shared_ptr<void> drop;
  std::lock_guard lock(mu_);
  connection_ = nullptr;
  if (state_ == State::reading) {
    // The reader still uses the holder: it lets go of it at release.
    close_at_release_ = true;
    wanted_back_.store(true, std::memory_order_release);
    const std::uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
    return;
  }
  state_ = State::closed;
  drop = std::move(holder_);
  close_descriptors();
}

void ReadLane::close_descriptors() noexcept {
  // At once, not when the last holder lets go: the socket's own close (its FIN, or its reset) must
  // not wait for a rail that outlives the connection.
  if (fd_ >= 0) ::close(fd_);
  if (wake_ >= 0) ::close(wake_);
  fd_ = -1;
  wake_ = -1;
}

void ReadLane::request(std::uint64_t key) noexcept {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::loop) return;
  }
  if (requested_.exchange(true, std::memory_order_acq_rel)) return;
  if (!post(reactor_, shared_from_this(), false, key)) {
    requested_.store(false, std::memory_order_release);
  }
}

void* ReadLane::claim(std::uint64_t key) {
  std::lock_guard lock(mu_);
  if (state_ != State::lent || key_ != key || !holder_) return nullptr;
  state_ = State::reading;
  return holder_.get();
}

bool ReadLane::wait_readable() {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
  for (;;) {
    if (wanted_back_.load(std::memory_order_acquire)) return false;
    const int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return true;  // the read that follows says what is wrong
    if (fds[1].revents != 0 || wanted_back_.load(std::memory_order_acquire)) return false;
    if (fds[0].revents != 0) return true;
  }
}

ReadLane::Read ReadLane::read_more(std::size_t max) {
  if (taken_ > 0 && taken_ == bytes_.size()) {
    bytes_.clear();
    taken_ = 0;
  } else if (taken_ > 0 && bytes_.capacity() - bytes_.size() < max) {
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(taken_));
    taken_ = 0;
  }
  const std::size_t had = bytes_.size();
  bytes_.resize(had + max);
  std::size_t got = 0;
  const Read r = read_into(std::span(bytes_).subspan(had, max), got);
  bytes_.resize(had + got);
  return r;
}

ReadLane::Read ReadLane::read_into(std::span<std::uint8_t> to, std::size_t& got) {
  got = 0;
  ssize_t n = -1;
  int error = 0;
  // One look at the socket: bytes, its end or error, or the loop's call.
  const auto look = [&] {
    n = ::recv(fd_, to.data(), to.size(), MSG_DONTWAIT);
    error = n < 0 ? errno : 0;
    return n >= 0 || (error != EAGAIN && error != EWOULDBLOCK && error != EINTR) ||
           wanted_back_.load(std::memory_order_acquire);
  };
  for (;;) {
    if (wanted_back_.load(std::memory_order_acquire)) return Read::wanted_back;
    if (spin(look) || look()) {
      if (n > 0) {
        got = static_cast<std::size_t>(n);
        read_bytes_.fetch_add(got, std::memory_order_relaxed);
        if (counts_ != nullptr) counts_->received_bytes.fetch_add(got, std::memory_order_relaxed);
        return Read::bytes;
      }
      if (wanted_back_.load(std::memory_order_acquire)) return Read::wanted_back;
      // The socket's end or its error: the loop's own read finds it again and names it.
      if (n == 0 || (error != EAGAIN && error != EWOULDBLOCK && error != EINTR)) return Read::ended;
      continue;
    }
    if (!wait_readable()) return Read::wanted_back;
  }
}

template <typename Look>
bool ReadLane::spin(Look&& look) {
  // As the loops poll after activity (Reactor::note_activity): the peer's answer usually comes
  // within microseconds, and a sleeper's wake-up costs tens of them (across cores on the VM, a
  // blocking reader's round trip took five times a polling one's). Each look is a system call,
  // so each is followed by the yield, which also turns the spin off on a contended core.
  const std::int64_t start = rig::detail::steady_ns();
  if (!rig::detail::spins_allowed(start)) return false;
  const rig::detail::SpinTurn turn;
  if (!turn) return false;
  const std::int64_t until = start + static_cast<std::int64_t>(read_lane_spin_ns);
  for (;;) {
    const std::int64_t now = rig::detail::steady_ns();
    if (now >= until) return false;
    if (!rig::detail::yield_for_spin(now)) return look();
    if (look()) return true;
  }
}

void ReadLane::release(bool give_back) {
  bool post_it = false;
  std::shared_ptr<void> drop;
  {
    std::lock_guard lock(mu_);
    if (state_ != State::reading) return;
    if (close_at_release_) {
      state_ = State::closed;
      drop = std::move(holder_);
      close_descriptors();
      return;
    }
    if (give_back || wanted_back_.load(std::memory_order_acquire)) {
      state_ = State::returning;
      post_it = true;
    } else {
      state_ = State::lent;
    }
  }
  if (post_it) post_back();
}

void ReadLane::after_loop_writes() const noexcept {
  // A non-blocking write: at most a few microseconds, unless the loop's thread is preempted in it.
  while ((loop_writes_.load(std::memory_order_acquire) & 1) != 0) sched_yield();
}

void ReadLane::post_back() noexcept {
  // Without memory for the post, the connection's watch takes the lane back (returning) instead.
  (void)post(reactor_, shared_from_this(), true, 0);
}

}  // namespace rig::remote
