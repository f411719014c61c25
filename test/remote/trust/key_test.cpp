// Keys: key(), read_key() and read_key_fd(), each rule of "Keys and trust" with its exact refusal.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>

#include "remote/support.hpp"
#include "remote/trust/key.hpp"
#include "rig/remote.hpp"

using rig::remote::key;
using rig::remote::read_key;
using rig::remote::read_key_fd;
using rig::remote::test::ScratchDir;

namespace {

// A secret that is easy to spot in an error text, `n` bytes long.
std::string secret(std::size_t n) {
  std::string s;
  while (s.size() < n) s += "SeCrEt";
  s.resize(n);
  return s;
}

void write_file(const std::string& path, const std::string& bytes, mode_t mode = 0600) {
  {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

// A pipe that holds `bytes`; its write end closed unless `keep_open`. Owner: the test's scope.
struct KeyPipe {
  int fds[2] = {-1, -1};
  explicit KeyPipe(const std::string& bytes, bool keep_open = false) {
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    // Larger than the pipe's default 64 KiB would block this thread: the cases stay below it.
    REQUIRE(bytes.size() < 65536);
    REQUIRE(::write(fds[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    if (!keep_open) close_writer();
  }
  ~KeyPipe() {
    ::close(fds[0]);
    close_writer();
  }
  void close_writer() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  int reader() const { return fds[0]; }
};

// Keys of a wrong size and what a refusal says of each, for a file and a descriptor alike. The
// largest still fits in a pipe's buffer, so a test's writer never waits for its reader.
struct WrongSize {
  std::size_t bytes;
  std::string why;
};
const WrongSize wrong_sizes[] = {
    {15, "holds 15 bytes; a key has 16 to 4096 bytes"},
    {0, "holds 0 bytes; a key has 16 to 4096 bytes"},
    {4097, "holds more than 4096 bytes; a key has 16 to 4096 bytes"},
    {60000, "holds more than 4096 bytes; a key has 16 to 4096 bytes"},
};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("key() takes 16 to 4096 bytes and gives only the length when it refuses") {
    CHECK(key(secret(16)).ok());
    CHECK(key(secret(4096)).ok());
    CHECK(key(secret(16))->size() == 16);

    auto short_key = key(secret(15));
    REQUIRE_FALSE(short_key.ok());
    CHECK(short_key.error() == "a key has 16 to 4096 bytes, this one has 15");
    auto long_key = key(secret(4097));
    REQUIRE_FALSE(long_key.ok());
    CHECK(long_key.error() == "a key has 16 to 4096 bytes, this one has 4097");
    CHECK(key("").error() == "a key has 16 to 4096 bytes, this one has 0");
    CHECK(short_key.error().find("SeC") == std::string::npos);
  }

  TEST_CASE("keys compare by their bytes, and copies and moves keep them") {
    const auto a = key(secret(32)).value();
    const auto b = key(secret(32)).value();
    const auto c = key(secret(31) + "x").value();
    const auto d = key(secret(33)).value();
    CHECK(a == b);
    CHECK_FALSE(a == c);
    CHECK_FALSE(a == d);

    rig::remote::Key copy = a;
    CHECK(copy == a);
    rig::remote::Key moved = std::move(copy);
    CHECK(moved == a);
    CHECK(copy.size() == 0);  // NOLINT(bugprone-use-after-move): a moved-from key holds nothing
    copy = c;
    CHECK(copy == c);
    copy = std::move(moved);
    CHECK(copy == a);
  }

  TEST_CASE("read_key accepts a private regular file of 16 to 4096 bytes") {
    ScratchDir dir;
    for (std::size_t n : {16, 32, 4096}) {
      const auto path = dir.file("key" + std::to_string(n));
      write_file(path, secret(n));
      auto k = read_key(path);
      REQUIRE(k.ok());
      CHECK(*k == key(secret(n)).value());
    }
    // Owner read only is private too.
    const auto path = dir.file("readonly");
    write_file(path, secret(32), 0400);
    CHECK(read_key(path).ok());
  }

  TEST_CASE("read_key follows a symbolic link and checks the file it reaches") {
    ScratchDir dir;
    write_file(dir.file("target"), secret(32));
    REQUIRE(::symlink(dir.file("target").c_str(), dir.file("link").c_str()) == 0);
    auto k = read_key(dir.file("link"));
    REQUIRE(k.ok());
    CHECK(*k == key(secret(32)).value());

    REQUIRE(::chmod(dir.file("target").c_str(), 0644) == 0);
    CHECK(read_key(dir.file("link")).error() ==
          "key file " + dir.file("link") +
              ": grants its group or others access (mode 0644); chmod 600 it");
  }

  TEST_CASE("read_key refuses a key file with the wrong size, naming the file, never the bytes") {
    ScratchDir dir;
    for (const WrongSize& c : wrong_sizes) {
      CAPTURE(c.bytes);
      const auto path = dir.file("key" + std::to_string(c.bytes));
      write_file(path, secret(c.bytes));
      auto k = read_key(path);
      REQUIRE_FALSE(k.ok());
      CHECK(k.error() == "key file " + path + ": " + c.why);
      CHECK(k.error().find("SeC") == std::string::npos);
    }
  }

  TEST_CASE("read_key refuses a key file its group or others may access") {
    ScratchDir dir;
    for (mode_t mode : {0644, 0640, 0604, 0601, 0610, 0660, 0700 | 01, 0666}) {
      CAPTURE(mode);
      const auto path = dir.file("key");
      write_file(path, secret(32), mode);
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
      CHECK(read_key(path).error() == "key file " + path +
                                          ": grants its group or others access (mode " + octal +
                                          "); chmod 600 it");
    }
  }

  TEST_CASE("read_key refuses a key file of another user") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: making a file of another user needs root");
      return;
    }
    ScratchDir dir;
    const auto path = dir.file("key");
    write_file(path, secret(32));
    REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    CHECK(read_key(path).error() ==
          "key file " + path + ": belongs to user 65534, not to this process's user 0");
  }

  TEST_CASE("read_key refuses a FIFO at once, without waiting for a writer") {
    ScratchDir dir;
    const auto path = dir.file("fifo");
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    auto pending = std::async(std::launch::async, [&] { return read_key(path); });
    if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      // Unblock the reader so the test ends, then fail.
      const int fd = ::open(path.c_str(), O_WRONLY);
      ::close(fd);
      FAIL("read_key waited for a writer on a FIFO");
    }
    CHECK(pending.get().error() == "key file " + path + ": is a FIFO, not a regular file");
  }

  TEST_CASE("read_key refuses what is not a regular file, and what cannot be opened") {
    ScratchDir dir;
    const auto sub = dir.file("sub");
    REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
    CHECK(read_key(sub).error() == "key file " + sub + ": is a directory, not a regular file");
    CHECK(read_key("/dev/null").error() ==
          "key file /dev/null: is a character device, not a regular file");

    const auto missing = dir.file("missing");
    CHECK(read_key(missing).error() ==
          "key file " + missing + ": cannot open: No such file or directory");
    const auto dangling = dir.file("dangling");
    REQUIRE(::symlink(missing.c_str(), dangling.c_str()) == 0);
    CHECK(read_key(dangling).error() ==
          "key file " + dangling + ": cannot open: No such file or directory");
    CHECK(read_key(std::string("a\0b", 3)).error() ==
          std::string("key file a\0b: name holds a NUL byte", 35));
  }

  TEST_CASE("read_key_fd takes 16 to 4096 bytes from a pipe, to its end") {
    for (std::size_t n : {16, 32, 4096}) {
      CAPTURE(n);
      KeyPipe p(secret(n));
      auto k = read_key_fd(p.reader(), "stdin");
      REQUIRE(k.ok());
      CHECK(*k == key(secret(n)).value());
    }
  }

  TEST_CASE("read_key_fd refuses a wrong size, naming where it read, never the bytes") {
    for (const WrongSize& c : wrong_sizes) {
      CAPTURE(c.bytes);
      KeyPipe p(secret(c.bytes));
      auto k = read_key_fd(p.reader(), "stdin");
      REQUIRE_FALSE(k.ok());
      CHECK(k.error() == "key on stdin: " + c.why);
      CHECK(k.error().find("SeC") == std::string::npos);
    }
  }

  TEST_CASE("read_key_fd gives up on a writer that does not close, within its bound") {
    KeyPipe p(secret(32), true);
    const auto t0 = std::chrono::steady_clock::now();
    auto k = read_key_fd(p.reader(), "descriptor 5", 200);
    const double took_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(k.ok());
    CHECK(k.error() ==
          "key on descriptor 5: did not end within the time allowed (32 bytes came); the writer "
          "must close it");
    CHECK(took_s >= 0.2);
    CHECK(took_s < 5);
  }

  TEST_CASE("read_key_fd holds a redirected file to a key file's rules, and refuses a terminal") {
    ScratchDir dir;
    const auto path = dir.file("key");
    write_file(path, secret(32));
    {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      auto k = read_key_fd(fd, "stdin");
      ::close(fd);
      REQUIRE(k.ok());
      CHECK(*k == key(secret(32)).value());
    }
    REQUIRE(::chmod(path.c_str(), 0640) == 0);
    {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      CHECK(read_key_fd(fd, "stdin").error() ==
            "key on stdin: grants its group or others access (mode 0640); chmod 600 it");
      ::close(fd);
    }
    const int dir_fd = ::open(dir.file("").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(dir_fd >= 0);
    CHECK(read_key_fd(dir_fd, "stdin").error() == "key on stdin: is a directory");
    ::close(dir_fd);
    CHECK(read_key_fd(-1, "stdin").error() == "key on stdin: cannot stat: Bad file descriptor");

    const int tty = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tty < 0) {
      MESSAGE("skipped the terminal: no pseudo-terminal here");
      return;
    }
    REQUIRE(::grantpt(tty) == 0);
    REQUIRE(::unlockpt(tty) == 0);
    const int term = ::open(::ptsname(tty), O_RDWR | O_NOCTTY | O_CLOEXEC);
    REQUIRE(term >= 0);
    CHECK(read_key_fd(term, "stdin").error() == "key on stdin: is a terminal; pipe the key in");
    ::close(term);
    ::close(tty);
  }
}
