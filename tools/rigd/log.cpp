#include "rigd/log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "remote/wire/printable.hpp"

namespace rig::rigd {

namespace {

// The sink's lock within log_lock_wait_ms, or none. Tried again each millisecond rather than
// waited for with std::timed_mutex: GCC 12's ThreadSanitizer does not see that timed wait
// (pthread_mutex_clocklock) and reports every unlock after it as wrong.
std::unique_lock<std::mutex> lock_within(std::mutex& mu) {
  std::unique_lock lock(mu, std::try_to_lock);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(log_lock_wait_ms);
  while (!lock.owns_lock() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (void)lock.try_lock();
  }
  return lock;
}

// What ends a line cut to fit one write.
constexpr std::string_view cut_mark = "... (cut)";

std::string losses_text(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " log line was" : " log lines were") +
         " not written to stderr";
}

}  // namespace

LogSink::LogSink(int fd, std::string prefix) : prefix_(std::move(prefix)) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return;  // no stderr: every line is lost, and counted
  if (S_ISSOCK(st.st_mode)) {
    kind_ = Kind::socket;
    fd_ = fd;
    return;
  }
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
    // Reopening would give a description with an offset of its own, at odds with the shared one
    // the other writers of the file use.
    kind_ = Kind::file;
    fd_ = fd;
    return;
  }
  kind_ = S_ISFIFO(st.st_mode) ? Kind::pipe : Kind::stream;
  // O_NOCTTY: a terminal reopened must not become this process's controlling one.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const int own = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (own >= 0) {
    fd_ = own;
    own_fd_ = true;
  } else {
    // A FIFO whose reader has gone (ENXIO), or a device that cannot be opened again: the inherited
    // description, written only when poll says it has room (put).
    fd_ = fd;
  }
}

LogSink::~LogSink() {
  if (own_fd_) ::close(fd_);
}

void LogSink::set_prefix(std::string prefix) {
  std::lock_guard lock(mu_);
  prefix_ = std::move(prefix);
}

void LogSink::share_losses(LogLosses* losses) {
  std::lock_guard lock(mu_);
  losses->unreported += own_losses_.unreported.exchange(0);
  losses->total += own_losses_.total.exchange(0);
  losses_ = losses;
}

void LogSink::route_stderr() {
  std::lock_guard lock(mu_);
  if (own_fd_ && fd_ != STDERR_FILENO) (void)::dup2(fd_, STDERR_FILENO);
}

std::uint64_t LogSink::lost() const {
  return losses_->total.load();
}

void LogSink::count_lost(std::uint64_t n) {
  losses_->unreported += n;
  losses_->total += n;
}

ssize_t LogSink::put(std::string_view bytes) {
  for (;;) {
    ssize_t n = -1;
    switch (kind_) {
      case Kind::none:
        return -1;
      case Kind::socket:
        n = ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case Kind::pipe:
      case Kind::stream:
        if (!own_fd_) {
          // A blocking description: written only while it has room for a page, which a line of
          // at most PIPE_BUF bytes never exceeds (unless another writer takes the room between).
          pollfd p{fd_, POLLOUT, 0};
          if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) {
            if ((p.revents & (POLLERR | POLLHUP)) != 0) return -1;
            return 0;
          }
        }
        n = ::write(fd_, bytes.data(), bytes.size());
        break;
      case Kind::file:
        n = ::write(fd_, bytes.data(), bytes.size());
        break;
    }
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;  // EPIPE (SIGPIPE is ignored or MSG_NOSIGNAL), ENOSPC, EIO: the line is lost
  }
}

bool LogSink::room_for(std::size_t bytes, Urgency urgency) const {
  if (kind_ != Kind::pipe || urgency == Urgency::last) return true;
  int queued = 0;
  const int capacity = ::fcntl(fd_, F_GETPIPE_SZ);
  if (capacity <= 0 || ::ioctl(fd_, FIONREAD, &queued) != 0) return true;
  const std::size_t reserve = std::min(log_reserve_bytes, static_cast<std::size_t>(capacity) / 2);
  return static_cast<std::size_t>(queued) + bytes + reserve <= static_cast<std::size_t>(capacity);
}

bool LogSink::write_line(const std::string& line) {
  // The rest of a part-taken line goes first; while it cannot, nothing else may go after it.
  while (!pending_.empty()) {
    const ssize_t n = put(pending_);
    if (n < 0) {
      pending_.clear();  // the stream failed: the rest of that line is lost with it
      break;
    }
    if (n == 0) return false;
    pending_.erase(0, static_cast<std::size_t>(n));
  }
  const ssize_t n = put(line);
  if (n <= 0) return false;
  if (static_cast<std::size_t>(n) < line.size()) {
    // A terminal or a socket took a part: the rest follows before any other line, so that lines
    // never mix. It counts as written.
    pending_.assign(line, static_cast<std::size_t>(n));
  }
  return true;
}

bool LogSink::line(std::string_view text, Urgency urgency) {
  auto lock = lock_within(mu_);
  if (!lock.owns_lock()) {
    count_lost(1);
    return false;
  }
  std::string out = prefix_ + rig::remote::printable_once(text);
  if (out.size() + 1 > log_line_bytes_max) {
    out.resize(log_line_bytes_max - 1 - cut_mark.size());
    out += cut_mark;
  }
  out.push_back('\n');

  // The count of the lines lost goes out only with the line that follows it: a count that fits
  // where its line does not would only lose that line too.
  const std::uint64_t unreported = losses_->unreported.exchange(0);
  const std::string count =
      unreported > 0 ? prefix_ + losses_text(unreported) + "\n" : std::string();
  if (!room_for(count.size() + out.size(), urgency) || (!count.empty() && !write_line(count))) {
    losses_->unreported += unreported;
    count_lost(1);
    return false;
  }
  if (!write_line(out)) {
    count_lost(1);
    return false;
  }
  return true;
}

void LogSink::say_losses() {
  const std::uint64_t total = lost();
  if (total == 0) return;
  auto lock = lock_within(mu_);
  if (!lock.owns_lock()) return;
  // This line counts every loss; a separate count of the latest would only repeat it.
  losses_->unreported = 0;
  (void)write_line(prefix_ + losses_text(total) + "\n");
}

}  // namespace rig::rigd
