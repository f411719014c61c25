// rigd: the agent daemon. Binds its port before it touches any device, then serves jobs one after
// another, each in a fresh child process (a failed device can leave a process unusable; the daemon
// itself stays clean), and logs one line per job start, with the controller's address, and one per
// end, with the root cause.
//
//   rigd --key FILE|- --listen HOST:PORT [--kinds CPU,SIM,CUDA] [--cuda-lib PATH] [--once]
//        [--watch-stdin] [--metrics HOST:PORT]
//
// The key is read once, at the start (`-`: from stdin, to its end), and handed to each job process
// on a pipe; SIGHUP reads the file again, and a key that fails its checks leaves the one in use.
// --once serves a single job in this process and exits with its outcome (0 closed, 1 failed): the
// agent a launcher such as `rig run` starts, reporting on RIG_REMOTE_REPORT. With --watch-stdin
// (and --key -, --once) the key is stdin's first line rather than all of it, and the end of stdin
// stops the agent as SIGTERM does: a launcher that reaches the agent through a session (`rig run
// --ssh`) keeps stdin open for as long as it wants the agent, so nothing outlives the session.
//
// --metrics serves the daemon's metrics over HTTP (metrics_server.hpp), from a thread of the
// daemon: the job process only stores into a shared page (job_page.hpp), which the daemon reads.
// The machine's devices in /status come from a child the daemon starts once (`--probe-devices`,
// device_probe.hpp), so that the daemon itself opens no device.
//
// Every line goes to stderr through one sink that never blocks (log.hpp). Signals are taken by one
// thread of each process (sigwaitinfo), blocked in every other from the start, so that none is
// lost between a check and a wait. A stop (SIGTERM, SIGINT) ends the job in order; the watchdog
// ends a stop that runs past the job's drain bound and a margin.
//
// Exit codes: 0 after a clean stop (SIGTERM or SIGINT), 1 on a runtime failure, 2 on a usage
// error (a bad argument or key, or a bad value of a RIG_* tunable), 3 when the watchdog ends a
// shutdown that hangs.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "build_info.hpp"
#include "child/child.hpp"
#include "core/limits.hpp"
#include "remote/agent/agent.hpp"
#include "remote/io/address.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/counters.hpp"
#include "remote/job/process.hpp"
#include "remote/limits.hpp"
#include "remote/trust/key.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "rigd/device_probe.hpp"
#include "rigd/job_page.hpp"
#include "rigd/log.hpp"
#include "rigd/metrics.hpp"
#include "rigd/metrics_server.hpp"

namespace {

using rig::rigd::Urgency;
using Clock = std::chrono::steady_clock;

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;
constexpr int exit_watchdog = 3;

// How much longer than a job's drain bound (Timing::drain_timeout_ms: the longest an interrupted
// job waits for its peers to close) a stop may run before the watchdog ends it: time for the job
// process to close its devices and exit, and for the daemon to reap it and log. Not scaled by
// --test-timing-divisor: it is for processes that are slow, not for the liveness rules.
constexpr std::int64_t watchdog_margin_ms = 5'000;
// A job process that ends without reporting a job sooner than this after its start ends "at once":
// each such end in a row doubles the wait before the next one starts, from the first to the most.
constexpr std::int64_t quick_end_ms = 1'000;
constexpr std::int64_t respawn_delay_first_ms = 100;
constexpr std::int64_t respawn_delay_max_ms = 10'000;
// The most of a job process's report the daemon keeps: its end line holds a root cause of at most
// reason_bytes_max and a few words.
constexpr std::size_t report_bytes_max = rig::remote::reason_bytes_max + 1024;

rig::rigd::LogSink& sink() {
  // Made by main's first line, before any other thread.
  static rig::rigd::LogSink s(STDERR_FILENO, "rigd: ");
  return s;
}

void log(std::string_view line, Urgency urgency = Urgency::ordinary) {
  sink().line(line, urgency);
}

constexpr const char* usage_text =
    "usage: rigd --key FILE|- --listen HOST:PORT [--kinds CPU,SIM,CUDA] [--cuda-lib PATH] "
    "[--once [--watch-stdin]] [--metrics HOST:PORT]";

[[noreturn]] void usage(const std::string& why) {
  log(why);
  log(usage_text);
  std::exit(exit_usage);
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}
int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// What the signal thread tells the others. The stop and reload signals are blocked in every
// thread from main's start; the signal thread takes each with sigwaitinfo, records it here and
// wakes the main thread's waits through `wake_fd` (an eventfd they poll), so a signal that comes
// between a check and a wait is seen by the wait.
struct Signals {
  sigset_t set;
  int wake_fd = -1;
  std::atomic<int> stop{0};                 // the stop signal, once one came
  std::atomic<unsigned> reloads{0};         // SIGHUPs taken
  std::atomic<int> job_pidfd{-1};           // the job process running, which the watchdog kills
  std::atomic<bool> watchdog_fired{false};  // from then on, the process ends only with status 3
  std::int64_t watchdog_ms = 0;  // 0: no watchdog (a job process: its daemon's covers it)
  // A job process: SIGHUP asks it to make way for a job process with the daemon's new key, which it
  // does only while no controller has come (job_started).
  bool job_process = false;
  std::atomic<bool> job_started{false};
};
Signals signals;

void wake() {
  const std::uint64_t one = 1;
  (void)!write(signals.wake_fd, &one, sizeof one);
}

[[noreturn]] void watchdog() {
  // Further signals are taken and dropped meanwhile: the stop is under way.
  const auto until = Clock::now() + std::chrono::milliseconds(signals.watchdog_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    const timespec wait{static_cast<time_t>(left.count() / 1'000'000'000),
                        static_cast<long>(left.count() % 1'000'000'000)};
    (void)sigtimedwait(&signals.set, nullptr, &wait);
  }
  std::string what = "stop still running " + rig::remote::seconds_text(signals.watchdog_ms) +
                     " after signal " + std::to_string(signals.stop.load()) +
                     ": exiting at once (watchdog)";
  signals.watchdog_fired.store(true);
  const int job = signals.job_pidfd.load();
  if (job >= 0 && pidfd_send_signal(job, SIGKILL) == 0) {
    // Nothing of the job outlives the daemon: its end is awaited, briefly (SIGKILL always wins).
    pollfd p{job, POLLIN, 0};
    (void)poll(&p, 1, 1000);
    what += "; the job process was killed";
  }
  sink().say_losses();
  log(what, Urgency::last);
  _exit(exit_watchdog);
}

// The main thread, once the watchdog has fired: the kill it made must not read as a job's end
// followed by a clean stop, so this thread waits for the watchdog's exit.
void yield_to_watchdog() {
  while (signals.watchdog_fired.load()) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void take_signals() {
  pthread_setname_np(pthread_self(), "rigd-signals");
  for (;;) {
    const int sig = sigwaitinfo(&signals.set, nullptr);
    if (sig < 0) continue;  // EINTR
    if (sig == SIGHUP) {
      if (signals.job_process && !signals.job_started.load() && signals.stop.load() == 0) {
        // Its daemon holds a new key, which a job process without a job yet makes way for. One
        // with a job goes on with the key its job proved. (A controller admitted in the moment
        // between this check and the loop's next tick has its job interrupted.)
        signals.stop.store(SIGHUP);
        rig::remote::request_break();
      }
      ++signals.reloads;
      wake();
      continue;
    }
    if (signals.stop.load() == 0 || signals.stop.load() == SIGHUP) {
      signals.stop.store(sig);
      rig::remote::request_break();  // a job served in this process ends its serve with Break
      wake();
      if (signals.watchdog_ms > 0) watchdog();
    }
  }
}

// --watch-stdin: a thread that waits for stdin's end (what comes before it is dropped), then stops
// the agent as a SIGTERM would, through the signal thread. Started after the signal thread, so it
// has the stop signals blocked as every thread does.
void watch_stdin() {
  std::thread([] {
    char buf[256];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    log("stdin ended (the launcher's session is gone): stopping");
    kill(getpid(), SIGTERM);
  }).detach();
}

// Blocks `sigs` in this thread (and every thread it starts from now on), then starts the thread
// that takes them.
void start_signal_thread(std::initializer_list<int> sigs, std::int64_t watchdog_ms,
                         bool job_process) {
  signals.job_process = job_process;
  sigemptyset(&signals.set);
  for (int s : sigs) sigaddset(&signals.set, s);
  pthread_sigmask(SIG_BLOCK, &signals.set, nullptr);
  signals.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  signals.watchdog_ms = watchdog_ms;
  std::thread(take_signals).detach();
}

struct Options {
  std::string key_file;  // "-": stdin
  std::string host;
  int port = -1;
  std::string kinds = "CPU,SIM";
  bool once = false;
  bool watch_stdin = false;  // the key is stdin's first line; stdin's end stops the agent
  std::string metrics_host;  // --metrics: where the endpoint listens (empty: no endpoint)
  int metrics_port = -1;
  // Internal, for a job process the daemon starts: the inherited listening socket, the pipe the
  // key comes on, the shared counts of the log's losses, the job's number.
  bool serve_child = false;
  int serve_fd = -1;
  int key_fd = -1;
  int losses_fd = -1;
  int page_fd = -1;   // the daemon's JobPage, which a job process tells what it knows
  int probe_fd = -1;  // the daemon's device probe: the lines go here (device_probe.hpp)
  std::uint64_t job = 0;
  int timing_divisor = 1;  // test-only: scales the liveness times down
};

int parse_fd(const std::string& option, const std::string& v) {
  char* end = nullptr;
  const long fd = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || fd < 0 || fd > 1'000'000) usage("bad " + option + " " + v);
  return static_cast<int>(fd);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--key") {
      o.key_file = value();
      if (o.key_file.empty()) usage("--key needs a file, or - for stdin");
    } else if (arg == "--listen") {
      const std::string v = value();
      // Port 0: the system chooses, and the listening line says which.
      auto at = rig::remote::parse_address(v, rig::remote::PortZero::allowed);
      if (!at) usage("--listen takes HOST:PORT, not '" + v + "': " + at.error());
      o.host = at->host;
      o.port = at->port;
    } else if (arg == "--metrics") {
      const std::string v = value();
      auto at = rig::remote::parse_address(v, rig::remote::PortZero::allowed);
      if (!at) usage("--metrics takes HOST:PORT, not '" + v + "': " + at.error());
      o.metrics_host = at->host;
      o.metrics_port = at->port;
    } else if (arg == "--once") {
      o.once = true;
    } else if (arg == "--watch-stdin") {
      o.watch_stdin = true;
    } else if (arg == "--kinds") {
      o.kinds = value();
    } else if (arg == "--cuda-lib") {
      // The CUDA backend reads RIG_CUDA_LIB when it first opens the driver, in the job's
      // process; the environment carries the choice there.
      const std::string path = value();
      if (path.empty()) usage("--cuda-lib needs a path");
      setenv("RIG_CUDA_LIB", path.c_str(), 1);
    } else if (arg == "--serve-fd") {
      o.serve_child = true;
      o.serve_fd = parse_fd(arg, value());
    } else if (arg == "--key-fd") {
      o.key_fd = parse_fd(arg, value());
    } else if (arg == "--metrics-fd") {
      o.page_fd = parse_fd(arg, value());
    } else if (arg == "--probe-devices") {
      o.probe_fd = parse_fd(arg, value());
    } else if (arg == "--log-losses-fd") {
      o.losses_fd = parse_fd(arg, value());
    } else if (arg == "--job") {
      char* end = nullptr;
      const std::string v = value();
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') usage("bad --job " + v);
      o.job = n;
    } else if (arg == "--test-timing-divisor") {
      o.timing_divisor = std::atoi(value().c_str());
      if (o.timing_divisor < 1) usage("--test-timing-divisor must be at least 1");
    } else if (arg == "-h" || arg == "--help") {
      std::printf("%s\n", usage_text);
      std::exit(0);
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (o.probe_fd >= 0) return o;  // needs only --kinds
  if (o.key_file.empty() && o.key_fd < 0) usage("--key FILE is required");
  if (o.port < 0) usage("--listen HOST:PORT is required");
  if (o.watch_stdin && (!o.once || o.key_file != "-")) {
    usage("--watch-stdin needs --once and --key -");
  }
  if (o.once && o.metrics_port >= 0) {
    usage("--metrics is served by the daemon, which --once does not run");
  }
  return o;
}

std::vector<std::pair<std::string, rig::remote::Opener>> openers(const std::string& kinds) {
  std::vector<std::pair<std::string, rig::remote::Opener>> out;
  std::size_t start = 0;
  while (start <= kinds.size()) {
    const std::size_t comma = kinds.find(',', start);
    const std::string name =
        kinds.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto kind = rig::kind_from_name(name);
    if (!kind) usage("unknown device kind '" + name + "' in --kinds");
    for (const auto& o : out) {
      if (o.first == name) usage("--kinds names " + name + " twice");
    }
    out.emplace_back(name, [k = *kind, name]() -> rig::Result<std::vector<rig::Device>> {
      auto devices = rig::open(k);
      if (devices.empty()) return rig::Error("this machine has no " + name + " devices");
      return devices;
    });
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The key this process starts with: from the file, stdin, or (a job process) the daemon's pipe.
rig::Result<rig::remote::Key> first_key(const Options& o) {
  if (o.key_fd >= 0) {
    auto k = rig::remote::read_key_fd(o.key_fd, "descriptor " + std::to_string(o.key_fd));
    ::close(o.key_fd);
    return k;
  }
  if (o.key_file == "-" && o.watch_stdin) {
    // One line, so that stdin stays open after it: its end is the launcher's word to stop.
    if (isatty(STDIN_FILENO)) return rig::Error("key on stdin: is a terminal; pipe the key in");
    std::string pending;
    auto line = rig::child::read_line(STDIN_FILENO, pending,
                                      static_cast<int>(rig::remote::key_read_timeout_ms));
    explicit_bzero(pending.data(), pending.size());
    if (!line) {
      return rig::Error("key on stdin: no line came before its end or within " +
                        rig::remote::seconds_text(rig::remote::key_read_timeout_ms) +
                        " (--watch-stdin takes the key as stdin's first line)");
    }
    auto k = rig::remote::key(*line);
    explicit_bzero(line->data(), line->size());
    if (!k) return rig::Error("key on stdin: " + k.error());
    return k;
  }
  if (o.key_file == "-") return rig::remote::read_key_fd(STDIN_FILENO, "stdin");
  return rig::remote::read_key(o.key_file);
}

// The daemon's counts of lost log lines, in a memfd its job processes map too. -1 if none could
// be made: each process then counts its own.
int share_losses() {
  const int fd = memfd_create("rigd-log-losses", MFD_CLOEXEC);
  if (fd < 0) return -1;
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(rig::rigd::LogLosses)) == 0) {
    p = mmap(nullptr, sizeof(rig::rigd::LogLosses), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    ::close(fd);
    return -1;
  }
  sink().share_losses(new (p) rig::rigd::LogLosses);
  return fd;
}

void join_losses(int fd) {
  void* p = mmap(nullptr, sizeof(rig::rigd::LogLosses), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  // The daemon made the counts; this process only adds to them.
  if (p != MAP_FAILED) sink().share_losses(static_cast<rig::rigd::LogLosses*>(p));
}

// The page job processes tell the daemon's metrics what they know on (job_page.hpp), in a memfd:
// its descriptor, which each job process maps, and the daemon's own mapping. Error if none could
// be made.
rig::Result<std::pair<int, rig::rigd::JobPage*>> share_page() {
  const int fd = memfd_create("rigd-job-page", MFD_CLOEXEC);
  if (fd < 0) return rig::Error(std::string("memfd_create: ") + std::strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(rig::rigd::JobPage)) == 0) {
    p = mmap(nullptr, sizeof(rig::rigd::JobPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    return rig::Error(std::string("cannot map a shared page: ") + std::strerror(e));
  }
  return std::pair{fd, new (p) rig::rigd::JobPage};
}

// A job process's mapping of its daemon's page; nothing if it cannot be mapped (the job is served
// all the same, only the daemon's metrics lack what it would have said).
rig::rigd::JobPage* join_page(int fd) {
  void* p = mmap(nullptr, sizeof(rig::rigd::JobPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<rig::rigd::JobPage*>(p);
}

// A job process: serve one job on the inherited socket, report its end on the report pipe, exit.
// The daemon logs the end from the report; a job process run by hand, with no report pipe, logs
// it itself.
int serve_one(const Options& o, const rig::remote::Key& key) {
  int accepting = 0;
  socklen_t len = sizeof accepting;
  const std::string fd_text = "--serve-fd " + std::to_string(o.serve_fd);
  if (getsockopt(o.serve_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0) {
    log(fd_text + ": " + std::strerror(errno), Urgency::last);
    return exit_failure;
  }
  if (!accepting) {
    log(fd_text + " is not a listening socket", Urgency::last);
    return exit_failure;
  }
  const bool reported = std::getenv("RIG_REMOTE_REPORT") != nullptr;
  // The job process logs the job's start itself (only it knows the controller); the daemon logs
  // the end, which it learns even when the process dies without a word.
  rig::rigd::JobPage* page = o.page_fd >= 0 ? join_page(o.page_fd) : nullptr;
  if (page != nullptr) {
    rig::remote::set_connection_counters(&page->connections);
    rig::remote::set_work_counters(&page->work);
  }
  rig::remote::AgentEvents events;
  events.log = [](const std::string& line) { log(line); };
  events.started = [page](const std::string& controller_address) {
    if (page != nullptr) page->start(controller_address, rig::rigd::unix_ms_now());
    signals.job_started.store(true);
  };
  events.joined = [page](const std::vector<std::string>& agents) {
    if (page != nullptr) page->set_agents(agents);
  };
  rig::remote::set_agent_events(std::move(events));
  auto agent = rig::remote::adopt_listener(key, o.serve_fd, o.port,
                                           rig::remote::address_text(o.host, o.port));
  try {
    auto r = rig::remote::serve(agent, openers(o.kinds));
    if (!reported) log(r ? "closed" : "failed " + r.error(), Urgency::last);
    return r ? 0 : exit_failure;
  } catch (const rig::remote::Break&) {
    // Stopped by the daemon (or made way for its new key); a job it ended has reported that.
    if (!reported) log("interrupted", Urgency::last);
    return 0;
  }
}

// How a job process ended.
struct JobEnd {
  int status = 0;
  std::string report;
  std::int64_t lived_ms = 0;
  bool stopped = false;   // the daemon passed a stop on to it
  bool made_way = false;  // the daemon asked it to make way for a new key
};

// The daemon's main thread: the key it hands each job process, the job process running, and the
// wait between job processes that end at once. Owner: main; its thread; lifetime: the daemon's.
class Daemon {
 public:
  // `metrics` (null: no --metrics) is told each job process's start and end; its page is handed
  // to each job process on `page_fd`.
  Daemon(const Options& o, rig::remote::Key key, int listen_fd, std::string where, int losses_fd,
         rig::rigd::Metrics* metrics, int page_fd)
      : o_(o),
        key_(std::move(key)),
        listen_fd_(listen_fd),
        where_(std::move(where)),
        losses_fd_(losses_fd),
        metrics_(metrics),
        page_fd_(page_fd) {}

  int run() {
    for (std::uint64_t job = 1; signals.stop.load() == 0; ++job) {
      if (!pause(delay_ms_)) break;
      auto end = run_job(job);
      yield_to_watchdog();
      if (!end) return exit_failure;
      if (metrics_ != nullptr) metrics_->job_process_ended(job, end->report, end_text(*end));
      // The last job's end, in a stop, may use the log's reserve (log.hpp), as the stop's does.
      log("job " + std::to_string(job) + ": " + end_text(*end),
          signals.stop.load() != 0 ? Urgency::last : Urgency::ordinary);
      if (signals.stop.load() == 0) pace(*end);
    }
    sink().say_losses();
    log("stopped by signal " + std::to_string(signals.stop.load()), Urgency::last);
    return 0;
  }

 private:
  // Waits `ms` (0: none) for the next job process, handling signals meanwhile. False on a stop.
  bool pause(std::int64_t ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    JobEnd none;
    for (;;) {
      on_wake(-1, none);
      if (signals.stop.load() != 0) return false;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return true;
      pollfd p{signals.wake_fd, POLLIN, 0};
      (void)poll(&p, 1, static_cast<int>(left.count()));
    }
  }

  // What a wake brought: a stop, passed on to the job process once; a reload, after which a job
  // process still waiting for a controller makes way for one with the new key.
  // `pidfd` is the job process's (-1: none runs), `end` what the daemon did to it.
  void on_wake(int pidfd, JobEnd& end) {
    std::uint64_t count = 0;
    (void)!read(signals.wake_fd, &count, sizeof count);
    if (signals.stop.load() != 0 && pidfd >= 0 && !end.stopped) {
      end.stopped = true;
      pidfd_send_signal(pidfd, SIGINT);
    }
    const unsigned reloads = signals.reloads.load();
    if (reloads == reloads_seen_) return;
    reloads_seen_ = reloads;
    if (reload() && pidfd >= 0 && signals.stop.load() == 0 && !end.made_way) {
      end.made_way = true;
      pidfd_send_signal(pidfd, SIGHUP);
    }
  }

  // SIGHUP: the key file read again and checked. Whether the key changed.
  bool reload() {
    if (o_.key_file == "-") {
      log("SIGHUP: the key came on stdin (--key -): there is no file to reload; the key stays");
      return false;
    }
    auto k = rig::remote::read_key(o_.key_file);
    if (!k) {
      log("SIGHUP: the key in use stays: " + k.error());
      return false;
    }
    if (*k == key_) {
      log("SIGHUP: key file " + o_.key_file + " reloaded: the same key");
      return false;
    }
    key_ = std::move(*k);
    log("SIGHUP: key file " + o_.key_file +
        " reloaded: a new key, which jobs prove from the next job process on");
    return true;
  }

  // The key on a pipe of its own, whole before the job process starts: its read end, or -1.
  int key_pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    const auto bytes = rig::remote::detail::key_bytes(key_);
    // The pipe is empty and a key at most 4 KiB: one write takes it all, and never waits.
    (void)fcntl(fds[1], F_SETFL, O_NONBLOCK);
    const ssize_t n = write(fds[1], bytes.data(), bytes.size());
    ::close(fds[1]);
    if (n != static_cast<ssize_t>(bytes.size())) {
      ::close(fds[0]);
      errno = n < 0 ? errno : EMSGSIZE;
      return -1;
    }
    return fds[0];
  }

  std::optional<JobEnd> run_job(std::uint64_t job) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
      log(std::string("cannot make a report pipe: ") + std::strerror(errno) + ": stopping");
      return std::nullopt;
    }
    (void)fcntl(report[0], F_SETFL, O_NONBLOCK);
    const int key_fd = key_pipe();
    if (key_fd < 0) {
      log(std::string("cannot hand the key to a job process: ") + std::strerror(errno) +
          ": stopping");
      ::close(report[0]);
      ::close(report[1]);
      return std::nullopt;
    }
    // The job process runs rigd afresh on the inherited socket: no state of the daemon survives.
    // It never outlives its daemon: if rigd dies, the job is interrupted. It starts with the stop
    // and reload signals blocked, as this thread has them, so that one sent before it is ready
    // waits for its signal thread.
    rig::child::Spec spec;
    spec.file = "/proc/self/exe";
    spec.argv = {"rigd",
                 "--key-fd",
                 std::to_string(key_fd),
                 "--listen",
                 where_,
                 "--kinds",
                 o_.kinds,
                 "--serve-fd",
                 std::to_string(listen_fd_),
                 "--job",
                 std::to_string(job),
                 "--test-timing-divisor",
                 std::to_string(o_.timing_divisor)};
    spec.keep_fds = {listen_fd_, report[1], key_fd};
    if (losses_fd_ >= 0) {
      spec.argv.insert(spec.argv.end(), {"--log-losses-fd", std::to_string(losses_fd_)});
      spec.keep_fds.push_back(losses_fd_);
    }
    if (page_fd_ >= 0) {
      spec.argv.insert(spec.argv.end(), {"--metrics-fd", std::to_string(page_fd_)});
      spec.keep_fds.push_back(page_fd_);
    }
    spec.env = {"RIG_REMOTE_REPORT=" + std::to_string(report[1])};
    if (metrics_ != nullptr) metrics_->job_process_started(job);
    spec.parent_death_signal = SIGINT;
    const auto started = Clock::now();
    const auto spawned = rig::child::spawn(spec);
    ::close(report[1]);
    ::close(key_fd);
    if (!spawned) {
      ::close(report[0]);
      log("cannot start a job process: " + spawned.error() + ": stopping");
      return std::nullopt;
    }
    const pid_t child = *spawned;
    const int pidfd = pidfd_open(child);
    if (pidfd < 0) {
      const int e = errno;
      kill(child, SIGKILL);
      (void)rig::child::wait_exit(child);
      ::close(report[0]);
      log(std::string("cannot watch a job process: ") + std::strerror(e) + ": stopping");
      return std::nullopt;
    }
    signals.job_pidfd.store(pidfd);
    log("job " + std::to_string(job) + ": waiting for a controller in process " +
        std::to_string(child));
    JobEnd end = wait_job(child, pidfd, report[0]);
    end.lived_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    signals.job_pidfd.store(-1);
    ::close(pidfd);
    ::close(report[0]);
    return end;
  }

  // Reads the report as it comes and passes signals on, until the job process has ended.
  JobEnd wait_job(pid_t child, int pidfd, int report_fd) {
    JobEnd end;
    bool report_open = true;
    auto read_report = [&] {
      char buf[4096];
      ssize_t n;
      while ((n = read(report_fd, buf, sizeof buf)) > 0) {
        const auto room = report_bytes_max - std::min(report_bytes_max, end.report.size());
        end.report.append(buf, std::min(room, static_cast<std::size_t>(n)));
      }
      if (n == 0) report_open = false;  // its end, which poll would report for ever after
    };
    for (;;) {
      on_wake(pidfd, end);
      pollfd fds[3] = {{signals.wake_fd, POLLIN, 0},
                       {pidfd, POLLIN, 0},
                       {report_open ? report_fd : -1, POLLIN, 0}};
      if (poll(fds, 3, -1) < 0) continue;
      if (fds[2].revents != 0) read_report();
      if (fds[1].revents != 0) break;
    }
    // The process has ended: its report is all in the pipe, and the wait returns at once.
    read_report();
    end.status = rig::child::wait_exit(child);
    while (!end.report.empty() && end.report.back() == '\n') end.report.pop_back();
    return end;
  }

  static std::string end_text(const JobEnd& end) {
    if (!end.report.empty()) return end.report;
    if (WIFSIGNALED(end.status)) {
      // A crash or a kill: the job process reported nothing, so the signal is the root cause.
      return "process ended by signal " + std::to_string(WTERMSIG(end.status)) + " (" +
             strsignal(WTERMSIG(end.status)) + ")";
    }
    if (WEXITSTATUS(end.status) == 0 && end.stopped) return "no controller came before the stop";
    if (WEXITSTATUS(end.status) == 0 && end.made_way) {
      return "no controller came before the key changed: the next job process has the new key";
    }
    return "process exited with status " + std::to_string(WEXITSTATUS(end.status));
  }

  // A job process that ends at once without a job, again and again (a machine out of memory or
  // processes), is started again ever more slowly, up to a bound; the log says so when the wait
  // changes, not at every end.
  void pace(const JobEnd& end) {
    const bool at_once = end.report.empty() && !end.made_way && end.lived_ms < quick_end_ms;
    if (!at_once) {
      if (delay_ms_ > respawn_delay_first_ms) {
        log("a job process lived: the next ones start without a wait again");
      }
      delay_ms_ = 0;
      return;
    }
    const std::int64_t next =
        delay_ms_ == 0 ? respawn_delay_first_ms : std::min(delay_ms_ * 2, respawn_delay_max_ms);
    if (next != delay_ms_ && next > respawn_delay_first_ms) {
      log("job processes keep ending at once: the next starts in " +
          rig::remote::seconds_text(next) +
          (next == respawn_delay_max_ms ? ", and so on while they do" : ""));
    }
    delay_ms_ = next;
  }

  const Options& o_;
  rig::remote::Key key_;
  const int listen_fd_;
  const std::string where_;
  const int losses_fd_;
  rig::rigd::Metrics* const metrics_;
  const int page_fd_;
  unsigned reloads_seen_ = 0;
  std::int64_t delay_ms_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  (void)sink();
  const Options o = parse(argc, argv);
  // A job or probe process is this file run again through /proc/self/exe, which the kernel would
  // name "exe": named as the daemon, top, ps -e and pgrep -x rigd find it too.
  if (o.serve_child || o.probe_fd >= 0) prctl(PR_SET_NAME, "rigd");
  if (o.serve_child) {
    // Every line a job process writes names it and its job.
    sink().set_prefix("rigd[" + std::to_string(getpid()) + "]: job " + std::to_string(o.job) +
                      ": ");
  }
  sink().route_stderr();
  if (o.losses_fd >= 0) join_losses(o.losses_fd);
  // Every tunable now: a bad value stops the daemon here, not each job it would have served.
  try {
    rig::detail::check_tunables(rig::detail::core_tunables);
    rig::detail::check_tunables(rig::remote::remote_tunables);
  } catch (const std::invalid_argument& e) {
    log(e.what(), Urgency::last);
    return exit_usage;
  }
  signal(SIGPIPE, SIG_IGN);
  if (o.probe_fd >= 0) return rig::rigd::probe_devices(openers(o.kinds), o.probe_fd);
  if (o.timing_divisor > 1) {
    rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(o.timing_divisor));
  }
  const std::int64_t watchdog_ms = rig::remote::job_timing().drain_timeout_ms + watchdog_margin_ms;
  if (o.serve_child) {
    // A job process never forks further jobs, whatever else its arguments say. Its signals were
    // blocked from its start (the daemon's mask); its daemon's watchdog covers its stop.
    start_signal_thread({SIGINT, SIGTERM, SIGHUP}, 0, true);
    auto key = first_key(o);
    if (!key) {
      log(key.error(), Urgency::last);
      return exit_usage;
    }
    return serve_one(o, *key);
  }
  // A --once agent is one job under a launcher: a hangup ends it as the system's default does.
  if (o.once) {
    start_signal_thread({SIGINT, SIGTERM}, watchdog_ms, false);
  } else {
    start_signal_thread({SIGINT, SIGTERM, SIGHUP}, watchdog_ms, false);
  }
  auto key = first_key(o);
  if (!key) {
    log(key.error(), Urgency::last);
    return exit_usage;
  }

  // The port first, before any device is opened: a second daemon fails here, touching nothing.
  auto agent = rig::remote::listen(*key, o.host, o.port);
  const std::string me = "rigd[" + std::to_string(getpid()) + "]: ";
  sink().set_prefix(me);
  if (!agent) {
    log(agent.error(), Urgency::last);
    return exit_failure;
  }
  (void)openers(o.kinds);  // checks --kinds now, not at the first job
  const int port = agent->port();
  const std::string where = rig::remote::address_text(o.host, port);
  // --metrics: its endpoint, before the listening line, so that a port taken fails the start
  // before anyone is told the agent listens; it serves until the daemon returns.
  std::unique_ptr<rig::rigd::Metrics> metrics;
  std::unique_ptr<rig::rigd::MetricsServer> server;
  std::unique_ptr<rig::rigd::DeviceProbe> probe;  // ends before the metrics it tells
  int page_fd = -1;
  if (o.metrics_port >= 0) {
    auto page = share_page();
    if (!page) {
      log("cannot serve metrics: " + page.error(), Urgency::last);
      return exit_failure;
    }
    page_fd = page->first;
    metrics = std::make_unique<rig::rigd::Metrics>(
        rig::rigd::AgentFacts{RIGD_VERSION, rig::rigd::build_commit, where, o.kinds,
                              rig::host().arch(), static_cast<long>(getpid()),
                              rig::rigd::unix_ms_now()},
        page->second);
    auto served = rig::rigd::MetricsServer::start(o.metrics_host, o.metrics_port, *metrics);
    if (!served) {
      log(served.error(), Urgency::last);
      return exit_failure;
    }
    server = std::move(*served);
    // Answers /status's devices while the endpoint already serves.
    probe = std::make_unique<rig::rigd::DeviceProbe>(o.kinds, *metrics);
  }
  const std::string listening = rig::remote::listening_line(o.host, port);
  std::printf("%s\n", listening.c_str());
  std::fflush(stdout);
  log(listening + " kinds " + o.kinds + " host " + rig::host().arch() + " key " +
      (o.key_file == "-" ? std::string("from stdin") : o.key_file));
  if (server) {
    const std::string line = "metrics " + rig::remote::address_text(o.metrics_host, server->port());
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    log(line + " (/metrics, /status)");
  }

  if (o.once) {
    if (o.watch_stdin) watch_stdin();
    rig::remote::AgentEvents events;
    events.log = [](const std::string& line) { log("job: " + line); };
    rig::remote::set_agent_events(std::move(events));
    int status = exit_failure;
    std::string end = "job: interrupted";
    try {
      auto r = rig::remote::serve(*agent, openers(o.kinds));
      end = r ? "job: closed" : "job: failed " + r.error();
      status = r ? 0 : exit_failure;
    } catch (const rig::remote::Break&) {
    }
    sink().say_losses();
    log(end, Urgency::last);
    return status;
  }

  // The listening socket, handed to each job process; the daemon never accepts on it.
  const int listen_fd = dup(rig::remote::listener_fd(*agent));
  if (listen_fd < 0) {
    log(std::string("cannot keep the listening socket: ") + std::strerror(errno), Urgency::last);
    return exit_failure;
  }
  const int losses_fd = share_losses();
  if (losses_fd < 0) {
    log(std::string("cannot share the log's counts with job processes: ") + std::strerror(errno) +
        ": each counts the lines it loses itself");
  }
  Daemon daemon(o, std::move(*key), listen_fd, where, losses_fd, metrics.get(), page_fd);
  return daemon.run();
}
