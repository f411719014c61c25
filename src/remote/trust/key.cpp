// Keys: rig::remote::Key, key(), read_key(), read_key_fd(), and writing new key files.
#include "remote/trust/key.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "remote/limits.hpp"
#include "remote/trust/random.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

namespace {

std::string range_text() {
  return "a key has " + std::to_string(key_bytes_min) + " to " + std::to_string(key_bytes_max) +
         " bytes";
}

std::string file_error(std::string_view path, std::string_view why) {
  return "key file " + std::string(path) + ": " + std::string(why);
}

std::string errno_text(std::string_view action, int err) {
  return std::string(action) + ": " + std::strerror(err);
}

// What kind of file a mode is, for the refusal of anything but a regular file.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Closes a descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  // Closes now, reporting the error that a write-back at close may give.
  int close() noexcept {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Wipes a stack buffer that held key bytes on every path out of a function.
class Wipe {
 public:
  explicit Wipe(std::span<std::uint8_t> bytes) noexcept : bytes_(bytes) {}
  Wipe(const Wipe&) = delete;
  Wipe& operator=(const Wipe&) = delete;
  ~Wipe() { sodium_memzero(bytes_.data(), bytes_.size()); }

 private:
  std::span<std::uint8_t> bytes_;
};

}  // namespace

Key::Key(std::span<const std::uint8_t> bytes)
    : bytes_(new std::uint8_t[bytes.size()]), size_(bytes.size()) {
  std::memcpy(bytes_.get(), bytes.data(), size_);
}

Key::Key(const Key& other) : Key(detail::key_bytes(other)) {}

Key::Key(Key&& other) noexcept : bytes_(std::move(other.bytes_)), size_(other.size_) {
  other.size_ = 0;
}

Key& Key::operator=(const Key& other) {
  if (this != &other) *this = Key(other);
  return *this;
}

Key& Key::operator=(Key&& other) noexcept {
  if (this != &other) {
    wipe();
    bytes_ = std::move(other.bytes_);
    size_ = other.size_;
    other.size_ = 0;
  }
  return *this;
}

Key::~Key() {
  wipe();
}

void Key::wipe() noexcept {
  if (bytes_) sodium_memzero(bytes_.get(), size_);
  bytes_.reset();
  size_ = 0;
}

bool operator==(const Key& a, const Key& b) noexcept {
  // The sizes are not secret; the bytes are compared without an early exit.
  return a.size_ == b.size_ && sodium_memcmp(a.bytes_.get(), b.bytes_.get(), a.size_) == 0;
}

std::span<const std::uint8_t> detail::key_bytes(const Key& key) noexcept {
  return {key.bytes_.get(), key.size_};
}

Result<Key> key(std::string_view bytes) {
  if (bytes.size() < key_bytes_min || bytes.size() > key_bytes_max)
    return Error(range_text() + ", this one has " + std::to_string(bytes.size()));
  return Key({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
}

namespace {

// The checks a file that holds a key must pass: only this user may know the key. `where` makes the
// Error's text from the reason.
template <typename Where>
Result<Unit> check_private_file(const struct stat& st, const Where& where) {
  if (!S_ISREG(st.st_mode))
    return Error(where(std::string("is ") + file_kind(st.st_mode) + ", not a regular file"));
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    return Error(where("belongs to user " + std::to_string(st.st_uid) +
                       ", not to this process's user " + std::to_string(me)));
  if ((st.st_mode & 077) != 0)
    return Error(where("grants its group or others access (mode " + octal_mode(st.st_mode) +
                       "); chmod 600 it"));
  return Unit{};
}

// The key `fd` holds from where it stands to its end, which must come by `deadline` (a pipe's
// writer may be slow, or leave it open). Reads one byte more than a key may have, to tell "too
// many" from "exactly the maximum"; what lies beyond is left unread. `where` makes the Error's text
// from the reason; no text holds a byte of the key.
template <typename Where>
Result<Key> read_key_bytes(int fd, std::chrono::steady_clock::time_point deadline,
                           const Where& where) {
  std::array<std::uint8_t, key_bytes_max + 1> buffer;
  const Wipe wipe(buffer);
  std::size_t got = 0;
  while (got < buffer.size()) {
    // Waits only where the bytes are not there yet: a regular file is always ready.
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      return Error(where("did not end within the time allowed (" + std::to_string(got) +
                         " bytes came); the writer must close it"));
    const ssize_t n = ::read(fd, buffer.data() + got, buffer.size() - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return Error(where(errno_text("cannot read", errno)));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > key_bytes_max)
    return Error(
        where("holds more than " + std::to_string(key_bytes_max) + " bytes; " + range_text()));
  if (got < key_bytes_min)
    return Error(where("holds " + std::to_string(got) + " bytes; " + range_text()));
  return key({reinterpret_cast<const char*>(buffer.data()), got});
}

}  // namespace

Result<Key> read_key(std::string_view path) {
  const std::string name(path);
  if (name.find('\0') != std::string::npos) return Error(file_error(path, "name holds a NUL byte"));
  const auto where = [path](std::string_view why) { return file_error(path, why); };

  // One open, and every check on what it opened, so nothing can swap the file between a check and
  // the read. O_NONBLOCK lets a FIFO open without a writer (we refuse it just after); O_NOCTTY
  // keeps a terminal from becoming ours. Symbolic links are followed: the owner and mode checks
  // below apply to the target, and an attacker cannot make a file owned by us.
  Fd fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return Error(where(errno_text("cannot open", errno)));

  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error(where(errno_text("cannot stat", errno)));
  if (auto ok = check_private_file(st, where); !ok) return Error(ok.error());
  // A regular file never waits: the deadline is only for the shared loop.
  return read_key_bytes(
      fd.get(), std::chrono::steady_clock::now() + std::chrono::milliseconds(key_read_timeout_ms),
      where);
}

Result<Key> read_key_fd(int fd, std::string_view name, std::int64_t timeout_ms) {
  const auto where = [name](std::string_view why) {
    return "key on " + std::string(name) + ": " + std::string(why);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error(where(errno_text("cannot stat", errno)));
  // Typed at a terminal, the key would be echoed on the screen and kept in its scrollback.
  if (::isatty(fd)) return Error(where("is a terminal; pipe the key in"));
  // Redirected from a file, the key is held to a key file's rules.
  if (S_ISREG(st.st_mode)) {
    if (auto ok = check_private_file(st, where); !ok) return Error(ok.error());
  } else if (S_ISDIR(st.st_mode)) {
    return Error(where("is a directory"));
  }
  return read_key_bytes(
      fd, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms), where);
}

Result<Unit> write_new_key(std::string_view path) {
  const std::string name(path);
  if (name.find('\0') != std::string::npos) return Error(file_error(path, "name holds a NUL byte"));

  // O_EXCL refuses an existing file and, with O_CREAT, a symbolic link even to a missing target.
  Fd fd(
      ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600));
  if (fd.get() < 0) {
    if (errno == EEXIST)
      return Error(file_error(path, "already exists; a key is never overwritten"));
    return Error(file_error(path, errno_text("cannot create", errno)));
  }

  std::array<std::uint8_t, keygen_bytes> bytes;
  const Wipe wipe(bytes);
  random_bytes(bytes);
  std::string failure;
  // The umask may have taken bits from 0600; the owner must be able to read the key back.
  if (::fchmod(fd.get(), 0600) != 0) failure = errno_text("cannot set mode 0600", errno);
  std::size_t put = 0;
  while (failure.empty() && put < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      failure = errno_text("cannot write", errno);
    else
      put += static_cast<std::size_t>(n);
  }
  if (failure.empty() && ::fsync(fd.get()) != 0) failure = errno_text("cannot sync", errno);
  if (fd.close() != 0 && failure.empty()) failure = errno_text("cannot close", errno);
  if (!failure.empty()) {
    ::unlink(name.c_str());
    return Error(file_error(path, failure));
  }
  return Unit{};
}

}  // namespace rig::remote
