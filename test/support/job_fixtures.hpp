// What the job tests share: key files, rigd daemons on loopback port 0, and time.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
// For TCP_MAXSEG. A test that reads TCP_INFO's byte counts has <linux/tcp.h> first, which has it
// too, and the two headers do not mix.
#if !defined(_UAPI_LINUX_TCP_H) && !defined(_LINUX_TCP_H)
#include <netinet/tcp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/controller.hpp"
#include "remote/controller/member.hpp"
#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "rig/remote.hpp"
#include "support/pattern.hpp"
#include "support/process.hpp"

namespace rig::test {

// The spec's detection bounds (1 s) hold in every build; sanitizer builds run every process of a
// test several times slower, so their checks allow this factor on top.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr double sanitizer_slowdown = 3.0;
#else
inline constexpr double sanitizer_slowdown = 1.0;
#endif

// Tests of the liveness rules scale them down by this much: the 10 s rules become 1 s, the 1 s
// heartbeat 100 ms. Agents take the same through rigd's --test-timing-divisor.
inline constexpr int scaled_divisor = 10;

// The next jobs of this process run on the scaled times, for the scope. Owner: the test's stack
// frame; the test's thread.
struct ScaledTiming {
  ScaledTiming() { rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(scaled_divisor)); }
  ~ScaledTiming() { rig::remote::set_job_timing(rig::remote::Timing{}); }
  ScaledTiming(const ScaledTiming&) = delete;
  ScaledTiming& operator=(const ScaledTiming&) = delete;
};

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (run through meson test)");
  return v;
}

// A key file (mode 0600) in a directory of this test process's own; `tag` makes the key distinct.
inline std::string make_key_file(const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rig-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / (tag + ".key");
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  const std::string bytes = "rig test key " + tag + " 0123456789abcdefghijklmnop";
  REQUIRE(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return file;
}

inline rig::remote::Key load_key(const std::string& file) {
  auto k = rig::remote::read_key(file);
  REQUIRE_MESSAGE(k.ok(), (k.ok() ? "" : k.error()));
  return *k;
}

// Fixes socket `s`'s receive buffer at `receive_bytes` (before it connects, or on a listener
// before it accepts), so that the window it offers stays small and the sender's bytes back up.
// It also asks the sender for segments of a quarter of that. Without that, Linux caps the
// sender's segment at half the largest window seen (2048 bytes for 4 KiB) while this end offers
// the window in whole segments of what it last received: once it received 2000-byte segments, it
// offers 2000, one short of a segment, and the sender sends only a window probe every 200 ms, 10
// KB/s, long after this end reads again (a test that read 3 MB then waited 280 s).
inline void small_window(int s, int receive_bytes) {
  REQUIRE(setsockopt(s, SOL_SOCKET, SO_RCVBUF, &receive_bytes, sizeof receive_bytes) == 0);
  const int segment_bytes = receive_bytes / 4;
  REQUIRE(setsockopt(s, IPPROTO_TCP, TCP_MAXSEG, &segment_bytes, sizeof segment_bytes) == 0);
}

// A TCP connection to 127.0.0.1:port, made by hand (no handshake). A non-zero `receive_bytes`
// gives the socket a small window (small_window).
inline int connect_loopback(int port, int receive_bytes = 0) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_bytes > 0) small_window(s, receive_bytes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return s;
}

// Records that an agent of this test binary listens on loopback `port`; whether one did before.
// A job names an address HOST:PORT#N once N jobs of the process have dialed it, so an agent on a
// port an earlier agent had gets a name its test does not expect: FakeAgent takes another port
// then, and so does Rigd. Any thread.
inline bool port_seen_before(int port) {
  static std::mutex mu;
  static std::vector<int> seen;
  std::lock_guard lock(mu);
  if (std::find(seen.begin(), seen.end(), port) != seen.end()) return true;
  seen.push_back(port);
  return false;
}

// Whether `text` is `address` as this process's jobs name it, then `rest`. A job names an
// address HOST:PORT, and HOST:PORT#N once N jobs of the process have dialed it: an agent of a
// test on port 0 may get a port an earlier test's agent had, and its name then carries a count.
inline bool names_address(const std::string& text, const std::string& address,
                          const std::string& rest) {
  if (!text.starts_with(address)) return false;
  std::size_t at = address.size();
  if (at < text.size() && text[at] == '#') {
    const std::size_t digits = ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == digits) return false;
  }
  return text.compare(at, std::string::npos, rest) == 0;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Polls job.failed() until it reports a cause or `limit_s` have passed since `t0`.
inline std::optional<std::string> wait_for_failure(const rig::remote::Job& job,
                                                   std::chrono::steady_clock::time_point t0,
                                                   double limit_s) {
  std::optional<std::string> cause;
  while (!(cause = job.failed()) && seconds_since(t0) < limit_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cause;
}

// Threads that wait on a job until it fails. Should the test leave early (a REQUIRE, a call that
// throws), the destructor fails the job by losing `any` of its devices, which wakes every waiter,
// then joins them: the test reports its own failure, where a joinable std::thread's destructor
// would end the process without a word.
struct JobWaiters {
  const rig::Device& any;
  std::vector<std::thread> threads;
  explicit JobWaiters(const rig::Device& d) : any(d) {}
  JobWaiters(const JobWaiters&) = delete;
  JobWaiters& operator=(const JobWaiters&) = delete;
  void join() {
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  ~JobWaiters() {
    const bool early =
        std::any_of(threads.begin(), threads.end(), [](const auto& t) { return t.joinable(); });
    if (early) any.core()->lose("the test left before its waiters woke");
    join();
  }
};

// A rigd on 127.0.0.1, port 0, and the port it chose. Stopped with SIGTERM at the end.
struct Rigd {
  std::unique_ptr<Process> p;
  int port = 0;

  // `extra` goes on rigd's command line, `env_extra` ("NAME=VALUE") into its environment.
  explicit Rigd(const std::string& key_file, const std::vector<std::string>& extra = {},
                const std::vector<std::string>& env_extra = {}) {
    std::vector<std::string> argv = {env("RIG_RIGD"), "--key",   key_file, "--listen",
                                     "127.0.0.1:0",   "--kinds", "CPU,SIM"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    // A daemon on a port an earlier agent of this binary had would be named HOST:PORT#N by the
    // job, not as its test expects: another is started (the first still holding its port, so the
    // kernel gives the next one another), and those put aside stop when this constructor returns.
    std::vector<std::unique_ptr<Process>> put_aside;
    for (int tries = 0;; ++tries) {
      p = std::make_unique<Process>(argv, env_extra);
      const auto line = p->line();
      REQUIRE_MESSAGE(line.has_value(), "rigd printed no listening line");
      const auto at = rig::remote::parse_listening_line(*line);
      REQUIRE_MESSAGE(at.ok(), *line << ": " << (at.ok() ? "" : at.error()));
      REQUIRE(at->host == "127.0.0.1");
      port = at->port;
      REQUIRE(port > 0);
      if (!port_seen_before(port)) break;
      REQUIRE_MESSAGE(tries < 20, "every port rigd chose was one an earlier agent had");
      put_aside.push_back(std::move(p));
    }
    for (auto& q : put_aside) {
      q->signal(SIGTERM);
      q->wait_for(5000);
    }
  }
  ~Rigd() {
    p->signal(SIGTERM);
    p->wait_for(5000);
  }
  std::string name() const { return rig::remote::address_text("127.0.0.1", port); }
  rig::remote::Address address() const { return {"127.0.0.1", port}; }

  // The process serving job `n`, from rigd's log.
  pid_t job_pid(int n) {
    const auto l =
        p->err_until("job " + std::to_string(n) + ": waiting for a controller in process ");
    REQUIRE(l.has_value());
    return std::stoi(l->substr(l->rfind(' ') + 1));
  }
  // rigd's log line for the end of job `n` (skipping the job's other lines).
  std::optional<std::string> job_end(int n, int ms = 5000) {
    for (;;) {
      auto l = p->err_until("job " + std::to_string(n) + ": ", ms);
      if (!l || !is_job_progress(*l)) return l;
    }
  }
  // Whether a log line of a job is one of its lines before its end.
  static bool is_job_progress(const std::string& l) {
    return l.find("waiting for a controller") != std::string::npos ||
           l.find("started by the controller at ") != std::string::npos ||
           l.find("cannot accept a connection at ") != std::string::npos ||
           l.find("that had not proven the key, to make room") != std::string::npos;
  }
};

// A job on one rigd whose controller reports to a pipe, as under a launcher: connect_named with the
// launcher's descriptor.
struct ReportedJob {
  int report[2] = {-1, -1};
  std::optional<rig::Result<rig::remote::Job>> job;

  ReportedJob(const rig::remote::Key& key, const Rigd& a) {
    REQUIRE(pipe(report) == 0);
    rig::remote::Member m;
    m.name = a.name();
    m.dial_text = a.name();
    auto at = rig::remote::resolve("127.0.0.1", a.port);
    REQUIRE(at.ok());
    m.address = *at;
    std::vector<rig::remote::Member> members;
    members.push_back(std::move(m));
    job.emplace(
        rig::remote::connect_named(key, std::move(members), rig::remote::job_timing(), report[1]));
    REQUIRE_MESSAGE(job->ok(), (job->ok() ? "" : job->error()));
  }
  ~ReportedJob() {
    ::close(report[0]);
    ::close(report[1]);
  }
  // Every line reported so far.
  std::string lines() const {
    std::string out;
    char buf[512];
    pollfd p{report[0], POLLIN, 0};
    while (poll(&p, 1, 0) == 1) {
      const ssize_t n = ::read(report[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
};

// Closes a job (under a launcher's report pipe) whose one agent, `a`, is stopped and never answers,
// killing the agent once close returns: how long close took and the lines the controller reported.
struct CloseOverStopped {
  double took_s = 0;
  std::string lines;
};
inline CloseOverStopped close_over_stopped_agent(const std::string& key_file, Rigd& a) {
  ReportedJob r(load_key(key_file), a);
  const pid_t agent = a.job_pid(1);
  kill(agent, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  (*r.job)->close();
  CloseOverStopped out{seconds_since(t0), r.lines()};
  kill(agent, SIGKILL);
  return out;
}

// A job that closes when its test's scope ends, however it ends: a failed REQUIRE must not leave
// the process's one job open, failing every case after it with "a job of this process is open".
// Owner: the test's stack frame; any thread, as Job. Lifetime: the scope (never moved).
class ScopedJob : public rig::remote::Job {
 public:
  explicit ScopedJob(const rig::remote::Job& job) : rig::remote::Job(job) {}
  ~ScopedJob() {
    try {
      close();  // returns at once if the test closed it already
    } catch (...) {
    }
  }
  ScopedJob(const ScopedJob&) = delete;
  ScopedJob& operator=(const ScopedJob&) = delete;
};

// A job on `agents`, started or the test stops.
inline ScopedJob start_job(const std::string& key_file, const std::vector<Rigd*>& agents) {
  std::vector<rig::remote::Address> addresses;
  for (Rigd* a : agents) addresses.push_back(a->address());
  auto job = rig::remote::connect(load_key(key_file), addresses);
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  return ScopedJob(*job);
}

}  // namespace rig::test
