// rigd's log sink (tools/rigd/log.hpp) on each kind of stderr: a pipe nobody reads, a socket that
// stalls, a terminal, a file. Nothing here may block: each case would hang the test if it did.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rigd/log.hpp"

using rig::rigd::log_line_bytes_max;
using rig::rigd::LogLosses;
using rig::rigd::LogSink;
using rig::rigd::Urgency;

namespace {

// Everything readable on `fd` now, without waiting.
std::string drain(int fd) {
  std::string out;
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a log on a pipe nobody reads drops what does not fit, keeps a reserve, says so") {
    Pipe p;
    // The writer's own description is non-blocking; the pipe's, shared with others, is not.
    LogSink log(p.w, "rigd[1]: ");
    const int capacity = ::fcntl(p.w, F_GETPIPE_SZ);
    REQUIRE(capacity > 0);
    const std::string text(100, 'x');
    int written = 0;
    for (int i = 0; i < 2000; ++i) written += log.line(text) ? 1 : 0;
    CHECK((::fcntl(p.w, F_GETFL) & O_NONBLOCK) == 0);
    // 110 bytes a line; the reserve left free is what the last lines may use.
    const auto line_bytes = static_cast<int>(text.size() + 10);
    CHECK(written <= (capacity - static_cast<int>(rig::rigd::log_reserve_bytes)) / line_bytes);
    CHECK(written >= (capacity - static_cast<int>(rig::rigd::log_reserve_bytes)) / line_bytes - 2);
    CHECK(log.lost() == static_cast<std::uint64_t>(2000 - written));
    // The last lines fit in the reserve, with the count.
    CHECK(log.line("stopped by signal 15", Urgency::last));
    log.say_losses();

    const auto lines = lines_of(drain(p.r));
    REQUIRE(lines.size() == static_cast<std::size_t>(written) + 3);
    // The first loss is counted in the next line that gets through: the stop, preceded by it.
    CHECK(lines[lines.size() - 3] ==
          "rigd[1]: " + std::to_string(2000 - written) + " log lines were not written to stderr");
    CHECK(lines[lines.size() - 2] == "rigd[1]: stopped by signal 15");
    CHECK(lines.back() ==
          "rigd[1]: " + std::to_string(2000 - written) + " log lines were not written to stderr");
    for (int i = 0; i < written; ++i)
      CHECK(lines[static_cast<std::size_t>(i)] == "rigd[1]: " + text);
  }

  TEST_CASE("a log line is escaped once, at the sink, and cut to one whole write") {
    Pipe p;
    LogSink log(p.w, "rigd[1]: job 2: ");
    CHECK(log.line("name x\nrigd[1]: job 999: closed\x1b[2J"));
    CHECK(drain(p.r) == "rigd[1]: job 2: name x\\nrigd[1]: job 999: closed\\x1b[2J\n");
    CHECK(log.line(std::string(10000, 'y')));
    const std::string cut = drain(p.r);
    CHECK(cut.size() == log_line_bytes_max);
    CHECK(cut.substr(cut.size() - 10) == "... (cut)\n");
    CHECK(log.lost() == 0);
  }

  TEST_CASE("after a loss, the next line that gets through says how many were lost") {
    Pipe p;
    LogSink log(p.w, "rigd[1]: ");
    // Full to the reserve, then read empty, then one more line.
    const std::string text(200, 'z');
    int lost = 0;
    for (int i = 0; i < 1000; ++i) lost += log.line(text) ? 0 : 1;
    REQUIRE(lost > 0);
    (void)drain(p.r);
    CHECK(log.line("after"));
    CHECK(drain(p.r) == "rigd[1]: " + std::to_string(lost) +
                            " log lines were not written to stderr\nrigd[1]: after\n");
    // Said once: the next line carries no count.
    CHECK(log.line("again"));
    CHECK(drain(p.r) == "rigd[1]: again\n");
    CHECK(log.lost() == static_cast<std::uint64_t>(lost));
  }

  TEST_CASE("counts shared with another sink (another process) are said by whichever writes next") {
    Pipe p;
    LogLosses shared;
    LogSink a(p.w, "rigd[1]: ");
    LogSink b(p.w, "rigd[2]: job 1: ");
    a.share_losses(&shared);
    b.share_losses(&shared);
    int lost = 0;
    for (int i = 0; i < 1000; ++i) lost += b.line(std::string(200, 'b')) ? 0 : 1;
    REQUIRE(lost > 0);
    (void)drain(p.r);
    CHECK(a.line("daemon"));
    CHECK(drain(p.r) == "rigd[1]: " + std::to_string(lost) +
                            " log lines were not written to stderr\nrigd[1]: daemon\n");
    CHECK(a.lost() == static_cast<std::uint64_t>(lost));
    CHECK(shared.total.load() == static_cast<std::uint64_t>(lost));
  }

  TEST_CASE("a log on a socket that stalls keeps the rest of a part-sent line, and never blocks") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    const int small = 4096;
    REQUIRE(::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
    LogSink log(sv[0], "rigd[1]: ");
    int written = 0;
    for (int i = 0; i < 5000; ++i) written += log.line(std::string(300, 's')) ? 1 : 0;
    CHECK(written < 5000);
    CHECK(log.lost() == static_cast<std::uint64_t>(5000 - written));
    // Read it all, then one more line: whole lines only, the part-sent one finished first.
    std::string got;
    for (int round = 0; round < 50; ++round) {
      got += drain(sv[1]);
      if (log.line("end")) break;
    }
    got += drain(sv[1]);
    const auto lines = lines_of(got);
    REQUIRE(lines.size() >= 2);
    CHECK(lines.back() == "rigd[1]: end");
    CHECK(lines[lines.size() - 2] ==
          "rigd[1]: " + std::to_string(5000 - written) + " log lines were not written to stderr");
    for (std::size_t i = 0; i + 2 < lines.size(); ++i) {
      CHECK(lines[i] == "rigd[1]: " + std::string(300, 's'));
    }
    CHECK(lines.size() == static_cast<std::size_t>(written) + 2);
    ::close(sv[0]);
    ::close(sv[1]);
  }

  TEST_CASE("a log on a terminal whose output is held drops, then catches up") {
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) {
      MESSAGE("skipped: no pseudo-terminal here");
      return;
    }
    REQUIRE(::grantpt(master) == 0);
    REQUIRE(::unlockpt(master) == 0);
    const int term = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    REQUIRE(term >= 0);
    {
      // Nobody reads the master: the terminal's buffers fill.
      LogSink log(term, "rigd[1]: ");
      int written = 0;
      for (int i = 0; i < 5000; ++i) written += log.line(std::string(100, 't')) ? 1 : 0;
      CHECK(written < 5000);
      CHECK(log.lost() == static_cast<std::uint64_t>(5000 - written));
      CHECK((::fcntl(term, F_GETFL) & O_NONBLOCK) == 0);
    }
    ::close(term);
    ::close(master);
  }

  TEST_CASE("a log on a regular file writes every line at the file's end") {
    const auto path =
        std::filesystem::temp_directory_path() / ("rigd-log-test-" + std::to_string(::getpid()));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "before\n", 7) == 7);
    {
      LogSink log(fd, "rigd[1]: ");
      for (int i = 0; i < 3000; ++i) REQUIRE(log.line("line " + std::to_string(i)));
      CHECK(log.lost() == 0);
    }
    REQUIRE(::write(fd, "after\n", 6) == 6);  // the shared offset moved with the log's lines
    ::close(fd);
    std::ifstream in(path);
    std::stringstream all;
    all << in.rdbuf();
    const auto lines = lines_of(all.str());
    REQUIRE(lines.size() == 3002);
    CHECK(lines[0] == "before");
    CHECK(lines[1] == "rigd[1]: line 0");
    CHECK(lines[3000] == "rigd[1]: line 2999");
    CHECK(lines[3001] == "after");
    std::filesystem::remove(path);
  }
}
