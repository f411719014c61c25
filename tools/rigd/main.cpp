// rigd: the agent daemon. Binds its port before it touches any device, then serves jobs one after
// another, each in a fresh child process (a failed device can leave a process unusable; the daemon
// itself stays clean), and logs one line per job start, with the controller's address, and one per
// end, with the root cause.
//
//   rigd --key FILE --listen HOST:PORT [--kinds CPU,SIM,CUDA] [--cuda-lib PATH] [--once]
//
// --once serves a single job in this process and exits with its outcome (0 closed, 1 failed): the
// agent a launcher such as `rig run` starts, reporting on RIG_REMOTE_REPORT.
//
// Exit codes: 0 after a clean stop (SIGTERM or SIGINT), 1 on a runtime failure, 2 on a usage
// error (a bad argument, or a bad value of a RIG_* tunable), 3 when the watchdog ends a shutdown
// that hangs.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "child/child.hpp"
#include "core/limits.hpp"
#include "remote/agent/agent.hpp"
#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "remote/limits.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;
constexpr int exit_watchdog = 3;
// How long a stop may take before the watchdog ends the process.
constexpr auto shutdown_limit = std::chrono::seconds(10);

std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};

void on_stop_signal(int sig) {
  stop_signal.store(sig);
  stop_requested.store(true);
  rig::remote::request_break();  // a child serving a job ends its serve with Break
}

void log(const std::string& line) {
  std::string out = "rigd[" + std::to_string(getpid()) + "]: " + line + "\n";
  (void)!write(STDERR_FILENO, out.data(), out.size());
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "rigd: %s\nusage: rigd --key FILE --listen HOST:PORT [--kinds CPU,SIM,CUDA] "
               "[--cuda-lib PATH] [--once]\n",
               why.c_str());
  std::exit(exit_usage);
}

struct Options {
  std::string key_file;
  std::string host;
  int port = -1;
  std::string kinds = "CPU,SIM";
  bool once = false;
  bool serve_child = false;  // internal: a child serving one job on the inherited socket
  int serve_fd = -1;
  std::uint64_t job = 0;   // internal: the job number a child's log lines carry
  int timing_divisor = 1;  // test-only: scales the liveness times down
};

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
    } else if (arg == "--listen") {
      const std::string v = value();
      // Port 0: the system chooses, and the listening line says which.
      auto at = rig::remote::parse_address(v, rig::remote::PortZero::allowed);
      if (!at) usage("--listen takes HOST:PORT, not '" + v + "': " + at.error());
      o.host = at->host;
      o.port = at->port;
    } else if (arg == "--once") {
      o.once = true;
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
      char* end = nullptr;
      const std::string v = value();
      const long fd = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || fd < 0 || fd > 1'000'000) usage("bad --serve-fd " + v);
      o.serve_fd = static_cast<int>(fd);
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
      std::printf(
          "usage: rigd --key FILE --listen HOST:PORT [--kinds CPU,SIM,CUDA] [--cuda-lib PATH] "
          "[--once]\n");
      std::exit(0);
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (o.key_file.empty()) usage("--key FILE is required");
  if (o.port < 0) usage("--listen HOST:PORT is required");
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

// The child: serve one job on the inherited socket, report its end on the report pipe, exit.
int serve_one(const Options& o, const rig::remote::Key& key) {
  // The child logs the job's start itself (only it knows the controller); the daemon logs the end,
  // which it learns even when the child dies without a word. Both lines carry the job's number.
  const std::string prefix = "job " + std::to_string(o.job) + ": ";
  rig::remote::set_agent_log([prefix](const std::string& line) { log(prefix + line); });
  auto agent = rig::remote::adopt_listener(key, o.serve_fd, o.port,
                                           rig::remote::address_text(o.host, o.port));
  try {
    auto r = rig::remote::serve(agent, openers(o.kinds));
    return r ? 0 : exit_failure;
  } catch (const rig::remote::Break&) {
    return 0;  // stopped by the daemon's signal; a job it ended has reported its failure
  }
}

void watchdog() {
  while (!stop_requested.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(shutdown_limit);
  log("shutdown still running 10 s after the signal: exiting at once (watchdog)");
  _exit(exit_watchdog);
}

// Reads what a child reported on its pipe: its end line, or nothing if it died first. A stop
// signal that arrives meanwhile is passed on to the child, whose serve then ends the job.
std::string read_report(int fd, pid_t child) {
  std::string out;
  char buf[4096];
  bool passed_on = false;
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (stop_requested.load() && !passed_on) {
        passed_on = true;
        kill(child, SIGINT);
      }
      continue;
    }
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Every tunable now: a bad value stops the daemon here, not each job it would have served.
  try {
    rig::detail::check_tunables(rig::detail::core_tunables);
    rig::detail::check_tunables(rig::remote::remote_tunables);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "rigd: %s\n", e.what());
    return exit_usage;
  }
  signal(SIGPIPE, SIG_IGN);
  if (o.timing_divisor > 1) {
    rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(o.timing_divisor));
  }
  auto key = rig::remote::read_key(o.key_file);
  if (!key) {
    std::fprintf(stderr, "rigd: %s\n", key.error().c_str());
    return exit_usage;
  }
  if (o.serve_child) {
    // A job's process never forks further jobs, whatever else its arguments say.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    return serve_one(o, *key);
  }

  // The port first, before any device is opened: a second daemon fails here, touching nothing.
  auto agent = rig::remote::listen(*key, o.host, o.port);
  if (!agent) {
    log(agent.error());
    return exit_failure;
  }
  (void)openers(o.kinds);  // checks --kinds now, not at the first job
  const int port = agent->port();
  const std::string where = rig::remote::address_text(o.host, port);
  const std::string listening = rig::remote::listening_line(o.host, port);
  std::printf("%s\n", listening.c_str());
  std::fflush(stdout);
  log(listening + " kinds " + o.kinds + " host " + rig::host().arch() + " key " + o.key_file);

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::thread(watchdog).detach();

  if (o.once) {
    rig::remote::set_agent_log([](const std::string& line) { log("job: " + line); });
    try {
      auto r = rig::remote::serve(*agent, openers(o.kinds));
      log(r ? "job: closed" : "job: failed " + r.error());
      return r ? 0 : exit_failure;
    } catch (const rig::remote::Break&) {
      log("job: interrupted");
      return exit_failure;
    }
  }

  // The listening socket, handed to each child; the parent never accepts on it.
  const int listen_fd = dup(rig::remote::listener_fd(*agent));
  if (listen_fd < 0) {
    log(std::string("cannot keep the listening socket: ") + std::strerror(errno));
    return exit_failure;
  }
  const std::string self = "/proc/self/exe";
  for (std::uint64_t job = 1; !stop_requested.load(); ++job) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      log(std::string("cannot make a report pipe: ") + std::strerror(errno));
      return exit_failure;
    }
    // The child runs rigd afresh on the inherited socket: no state of the parent survives. A job
    // process never outlives its daemon: if rigd dies, the job is interrupted.
    rig::child::Spec spec;
    spec.file = self;
    spec.argv = {"rigd",
                 "--key",
                 o.key_file,
                 "--listen",
                 where,
                 "--kinds",
                 o.kinds,
                 "--serve-fd",
                 std::to_string(listen_fd),
                 "--job",
                 std::to_string(job),
                 "--test-timing-divisor",
                 std::to_string(o.timing_divisor)};
    spec.env = {"RIG_REMOTE_REPORT=" + std::to_string(pipe_fds[1])};
    spec.keep_fds = {listen_fd, pipe_fds[1]};
    spec.parent_death_signal = SIGINT;
    const auto spawned = rig::child::spawn(spec);
    if (!spawned) {
      log("cannot start a job process: " + spawned.error() + ": stopping");
      return exit_failure;
    }
    const pid_t child = *spawned;
    close(pipe_fds[1]);
    log("job " + std::to_string(job) + ": waiting for a controller in process " +
        std::to_string(child));
    const std::string report = read_report(pipe_fds[0], child);
    close(pipe_fds[0]);
    const int status = rig::child::wait_exit(child);
    std::string end;
    if (!report.empty()) {
      end = report;
    } else if (WIFSIGNALED(status)) {
      // A crash or a kill: the child reported nothing, so the signal is the root cause we know.
      end = "process ended by signal " + std::to_string(WTERMSIG(status)) + " (" +
            strsignal(WTERMSIG(status)) + ")";
    } else {
      end = "process exited with status " + std::to_string(WEXITSTATUS(status));
    }
    log("job " + std::to_string(job) + ": " + end);
    if (report.empty() && !stop_requested.load()) {
      // A job process that died without a word: do not spin if it keeps doing so.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  log("stopped by signal " + std::to_string(stop_signal.load()));
  return 0;
}
