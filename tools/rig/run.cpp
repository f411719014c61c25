// rig run --local N [--kinds K] [--rigd PATH] -- PROGRAM ARGS...
// rig run --ssh HOST[,HOST...] [--kinds K] [--rigd PATH] -- PROGRAM ARGS...
// rig run --slurm [--kinds K] [--rigd PATH] -- PROGRAM ARGS...
//
// Starts N agents (rigd --once) on loopback with a fresh key, or one on each HOST through ssh
// (launch_ssh.hpp: the key on ssh's stdin, the agent's report on its stdout, the agent ended by the
// end of its session), or one on each node of the Slurm allocation through srun (launch_slurm.hpp,
// the same way), then PROGRAM as the job's controller
// with RIG_REMOTE_AGENTS, RIG_REMOTE_KEY and RIG_REMOTE_REPORT; reads every process's report line,
// prints each process's end and the job's outcome with its root cause, and exits 0 only if the job
// closed in order and the controller exited 0. It waits on its processes' exits, each wait bounded
// (Launch::collect): a controller that ends before the job starts, an agent that dies or goes
// silent, a leftover process holding a report pipe open, none of them keeps it waiting.
//
// --test-timing-divisor N (for tests) divides rig run's bounds, and rigd's liveness times, by N.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "child/child.hpp"
#include "commands.hpp"
#include "launch_slurm.hpp"
#include "launch_ssh.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"
#include "remote/io/timing.hpp"
#include "remote/wire/printable.hpp"

namespace {

using rig::cli::exit_failure;
using rig::cli::exit_ok;
using rig::cli::exit_usage;
using rig::cli::LaunchFailure;
using Clock = std::chrono::steady_clock;

constexpr int agents_max = 64;
// How many descendants of the job's processes rig run looks for when it kills them all.
constexpr std::size_t descendants_max = 4096;
// An agent that has not printed its listening line by then did not start.
constexpr int agent_start_timeout_ms = 10'000;
// Without a pidfd to wait on, how often rig run looks whether a process has ended.
constexpr int tick_ms = 100;
constexpr std::string_view failed_prefix = "failed ";  // a report's end line of a failed job
// What rig run keeps of a report: its two lines, with a reason of up to 16 KiB (reason_bytes_max),
// fit; a process that writes more is cut there, not kept in memory without a bound.
constexpr std::size_t report_bytes_max = 64 * 1024;
constexpr std::size_t key_bytes = 32;  // 64 hexadecimal characters in RIG_REMOTE_KEY
// --test-timing-divisor's largest value: 10 s become 10 ms.
constexpr int timing_divisor_max = 1000;

// The most of an ssh or srun agent's stderr (its rigd's log) that rig run passes on once it has
// ended.
constexpr std::size_t agent_log_bytes_max = 64 * 1024;

const char* const usage_text =
    "usage: rig run --local N [--kinds CPU,SIM,CUDA] [--rigd PATH] -- PROGRAM [ARGS...]\n"
    "       rig run --ssh HOST[,HOST...] [--kinds CPU,SIM,CUDA] [--rigd PATH] -- PROGRAM "
    "[ARGS...]\n"
    "       rig run --slurm [--kinds CPU,SIM,CUDA] [--rigd PATH] -- PROGRAM [ARGS...]\n"
    "  Starts N agents on this machine (loopback), one on each HOST through ssh, or one on each\n"
    "  node of this Slurm allocation through srun, with a fresh key, then PROGRAM as the job's\n"
    "  controller; prints how each process ended and the job's root cause.\n";

int usage(const std::string& why) {
  std::fprintf(stderr, "rig run: %s\n%s", why.c_str(), usage_text);
  return exit_usage;
}

// The complete lines of `text`, without their newlines.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t nl; (nl = text.find('\n')) != std::string_view::npos;
       text.remove_prefix(nl + 1)) {
    lines.push_back(text.substr(0, nl));
  }
  return lines;
}

// Why rig run stopped a process of the job itself.
enum class Stop {
  none,
  job_not_started,       // an agent, once the controller had ended before the job started
  outlived_controller,   // an agent still running the bound after the controller's end
  interrupted,           // a second Ctrl-C or SIGTERM of rig run
  interrupt_unheeded,    // still running the bound after the first Ctrl-C or SIGTERM
  stopped_after_agents,  // the controller, stopped (SIGSTOP) the bound after every agent ended
};

// One process of the job, as the launcher sees it.
struct Member {
  std::string name;
  pid_t pid = -1;
  int pid_fd = -1;     // readable once the process has ended; -1 where the system gives none
  int report_fd = -1;  // read end of its report pipe (non-blocking), until EOF or its exit
  int out_fd = -1;     // an agent's stdout, for its listening line
  int in_fd = -1;      // an ssh or srun agent's stdin, open for as long as the agent is wanted
  int log_fd = -1;     // its stderr: a file in rig run's private directory
  // An ssh or srun agent: pid is its ssh or srun, which the end of in_fd stops.
  bool session = false;
  std::string out_pending;  // what was read from out_fd past its listening line
  std::string report;       // what it reported
  bool reaped = false;
  int status = 0;                // its wait status, once reaped
  Clock::time_point ended;       // when it was reaped
  std::string wait_error;        // why waitpid failed, if it did
  Stop stop = Stop::none;        // set when rig run sent it SIGTERM (or SIGKILL)
  Clock::time_point stopped_at;  // when rig run sent it SIGTERM
  bool killed = false;           // rig run sent it SIGKILL

  // Whether a "started" line came.
  bool started() const {
    return std::ranges::any_of(lines_of(report), [](std::string_view l) { return l == "started"; });
  }
  // Its end line ("closed" or "failed WHY"), or nothing; escaped if it is not printable already,
  // as a process's reasons are (rig run prints it).
  std::optional<std::string> end_line() const {
    for (std::string_view l : lines_of(report)) {
      if (l == "closed" || l.starts_with(failed_prefix)) return rig::remote::printable_once(l);
    }
    return std::nullopt;
  }
};

// Spawns argv (looked up in PATH) with `env` set in its environment, the write end `report_w` of
// its report pipe kept open in it, and its stdin on `in_r`, its stdout on `out_w`, each when not
// -1.
rig::Result<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int report_w, int in_r, int out_w) {
  rig::child::Spec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.env = env;
  spec.stdin_fd = in_r;
  spec.stdout_fd = out_w;
  spec.keep_fds = {report_w};  // inherited; every other descriptor of ours is close-on-exec
  return rig::child::spawn(spec);
}

std::string rigd_path(const std::optional<std::string>& given) {
  if (given) return *given;
  if (const char* env = std::getenv("RIG_RIGD")) return env;
  // Beside this rig: installed side by side, or in the build tree's tools/rigd/.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& candidate : {dir + "/rigd", dir + "/rigd/rigd"}) {
      struct stat st {};
      if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
    }
  }
  return "rigd";  // from PATH
}

// How many Ctrl-Cs (SIGINT) or SIGTERMs rig run has had while it waits on the job.
std::atomic<int> interrupt_count{0};
void on_interrupt(int) {
  interrupt_count.fetch_add(1);
}

// Holds SIGINT and SIGTERM back; the mask from before, for ppoll, inside which alone they then get
// through: one that comes after a look at interrupt_count still ends the wait that follows.
sigset_t hold_interrupts() {
  sigset_t held, open_mask;
  sigemptyset(&held);
  sigaddset(&held, SIGINT);
  sigaddset(&held, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &held, &open_mask);
  return open_mask;
}

// The time from now to `t` as ppoll takes it; zero once `t` has passed.
timespec time_until(Clock::time_point t) {
  const auto left = std::max(t - Clock::now(), Clock::duration::zero());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// How long rig run gives the job's processes (DESIGN.md "Launching": it never waits on a process
// that is gone, nor forever on one that says nothing): the real constants, or for tests divided
// by --test-timing-divisor, which rig run passes on to rigd too.
struct Bounds {
  // Once the controller has ended after the job started, how long an agent may take to end on
  // its own before it gets SIGTERM: the drain of a failed job's connections (10 s) and a second
  // for the tick and the process's exit.
  std::int64_t agent_end_ms;
  // How long a process that got SIGTERM has to exit before SIGKILL. rigd's break ends serve
  // within 200 ms; only a stopped or wedged process needs the SIGKILL.
  std::int64_t stop_ms;

  static Bounds scaled_down(int divisor) {
    constexpr std::int64_t exit_grace_ms = 1'000;
    constexpr std::int64_t stop_timeout_ms = 2'000;
    const auto drain_ms = rig::remote::Timing{}.scaled_down(divisor).drain_timeout_ms;
    return {drain_ms + exit_grace_ms / divisor, stop_timeout_ms / divisor};
  }
};

// What the command line asks for.
struct RunOptions {
  int local = 0;
  std::vector<std::string> ssh;  // the hosts of --ssh, as given
  bool slurm = false;
  std::string kinds = "CPU,SIM";
  std::optional<std::string> rigd;
  int timing_divisor = 1;  // test-only: scales rig run's bounds and rigd's liveness times down
  std::vector<std::string> program;
};

// The options, or the exit status to end with at once (usage, or --help).
std::variant<RunOptions, int> parse_options(std::span<char*> args) {
  RunOptions o;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      return std::string(args[++i]);
    };
    if (a == "--") {
      for (std::size_t k = i + 1; k < args.size(); ++k) o.program.emplace_back(args[k]);
      break;
    } else if (a == "--local") {
      auto v = value();
      if (!v) return usage("--local needs a count");
      char* end = nullptr;
      const long n = std::strtol(v->c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > agents_max) {
        return usage("--local takes a count from 1 to " + std::to_string(agents_max));
      }
      o.local = static_cast<int>(n);
    } else if (a == "--slurm") {
      o.slurm = true;
    } else if (a == "--ssh") {
      auto v = value();
      if (!v) return usage("--ssh needs a list of hosts");
      for (std::size_t start = 0; start <= v->size();) {
        const std::size_t comma = std::min(v->find(',', start), v->size());
        const std::string host = v->substr(start, comma - start);
        if (auto ok = rig::cli::check_host_name(host); !ok) return usage("--ssh: " + ok.error());
        if (std::ranges::find(o.ssh, host) != o.ssh.end()) {
          return usage("--ssh names " + host + " twice");
        }
        o.ssh.push_back(host);
        start = comma + 1;
      }
      if (o.ssh.size() > static_cast<std::size_t>(agents_max)) {
        return usage("--ssh takes at most " + std::to_string(agents_max) + " hosts");
      }
    } else if (a == "--kinds") {
      auto v = value();
      if (!v) return usage("--kinds needs a list");
      o.kinds = *v;
    } else if (a == "--rigd") {
      o.rigd = value();
      if (!o.rigd) return usage("--rigd needs a path");
    } else if (a == "--test-timing-divisor") {
      auto v = value();
      char* end = nullptr;
      const long n = v ? std::strtol(v->c_str(), &end, 10) : 0;
      if (!v || *end != '\0' || n < 1 || n > timing_divisor_max) {
        return usage("--test-timing-divisor takes a number from 1 to " +
                     std::to_string(timing_divisor_max));
      }
      o.timing_divisor = static_cast<int>(n);
    } else if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      return exit_ok;
    } else {
      return usage("unknown argument '" + a + "'");
    }
  }
  if ((o.local > 0) + !o.ssh.empty() + o.slurm != 1) {
    return usage("say where the agents run: one of --local N, --ssh HOST[,HOST...], --slurm");
  }
  if (o.program.empty()) return usage("no PROGRAM after --");
  return o;
}

// A fresh job key: 32 random bytes as 64 hexadecimal characters, which are themselves the key's
// bytes. It never touches a file: the agents read it on their stdin (rigd --key -), the
// controller in RIG_REMOTE_KEY, so nothing of it outlives rig run, even one killed by SIGKILL.
// Owner: the launcher; its text is wiped when it goes.
class JobKey {
 public:
  JobKey() = default;
  JobKey(const JobKey&) = delete;
  JobKey& operator=(const JobKey&) = delete;
  ~JobKey() { wipe(); }

  // Draws the key; an Error says why not.
  rig::Result<rig::Unit> make() {
    if (sodium_init() < 0) return rig::Error("libsodium failed to initialise");
    unsigned char raw[key_bytes];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(hex_, sizeof hex_, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    return rig::Unit{};
  }
  std::string text() const { return std::string(hex_, 2 * key_bytes); }
  void wipe() noexcept { sodium_memzero(hex_, sizeof hex_); }

 private:
  char hex_[2 * key_bytes + 1] = {};
};

// The job's processes as the launcher sees them: the controller first once it runs, then the
// agents. Owner: cmd_run. Threads: its one.
class Launch {
 public:
  Launch(std::string rigd, int timing_divisor)
      : rigd_(std::move(rigd)),
        timing_divisor_(timing_divisor),
        bounds_(Bounds::scaled_down(timing_divisor)) {}

  // Starts `count` agents, each on loopback, port 0, and waits for each one's listening line;
  // RIG_REMOTE_AGENTS' text for them, or an Error (every process started is stopped).
  rig::Result<std::string> start_agents(int count, const std::string& kinds, const JobKey& key) {
    std::string agents_env;
    std::vector<std::string> argv = {rigd_,         "--key",   "-",   "--listen",
                                     "127.0.0.1:0", "--kinds", kinds, "--once"};
    if (timing_divisor_ > 1) {
      argv.insert(argv.end(), {"--test-timing-divisor", std::to_string(timing_divisor_)});
    }
    for (int i = 0; i < count; ++i) {
      Member m;
      m.name = "agent" + std::to_string(i);
      int report[2], in[2], out[2];
      if (pipe2(report, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0 ||
          pipe2(out, O_CLOEXEC) != 0) {
        stop_all(SIGKILL);
        return rig::Error(std::string("pipe: ") + std::strerror(errno));
      }
      // The key, then the end of the agent's stdin, before the agent starts: 64 bytes fit in any
      // pipe's buffer, so the write never waits, and no agent that exits at once can make it
      // raise SIGPIPE.
      const std::string text = key.text();
      const bool handed =
          write(in[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
      const int write_error = errno;
      close(in[1]);
      if (!handed) {
        for (int fd : {report[0], report[1], in[0], out[0], out[1]}) close(fd);
        stop_all(SIGKILL);
        return rig::Error(m.name +
                          " could not be handed the job's key: " + std::strerror(write_error));
      }
      const auto pid =
          spawn(argv, {"RIG_REMOTE_REPORT=" + std::to_string(report[1])}, report[1], in[0], out[1]);
      close(report[1]);
      close(in[0]);
      close(out[1]);
      m.report_fd = report[0];
      m.out_fd = out[0];
      if (!pid) {
        stop_all(SIGKILL);
        return rig::Error(m.name + " could not start: " + pid.error());
      }
      watch(m, *pid);
      members_.push_back(m);
      Member& added = members_.back();
      const auto line =
          rig::child::read_line(added.out_fd, added.out_pending, agent_start_timeout_ms);
      const auto at = rig::remote::parse_listening_line(line.value_or(""));
      if (!at) {
        stop_all(SIGKILL);
        reap_all();
        return rig::Error(added.name + " could not start: " +
                          (line ? "it said '" + *line + "'" : "it printed no listening line"));
      }
      agents_env +=
          (i == 0 ? "" : ",") + added.name + "=" + rig::remote::address_text(at->host, at->port);
    }
    return agents_env;
  }

  // How an engine (ssh, srun) starts the agent of one host or node, by its index, and reads a
  // start that failed (launch_ssh.hpp, launch_slurm.hpp).
  struct Engine {
    std::vector<std::string> names;  // the agents' names, the hosts' or nodes' as given
    std::function<std::vector<std::string>(std::size_t, const std::vector<std::string>&)> argv;
    std::function<LaunchFailure(std::size_t, int, int, std::string_view, std::string_view)> failed;
  };

  // Starts an agent on each of `hosts` through ssh; start_engine_agents says the rest. Every name
  // is resolved first, so that nothing starts for a list with one that does not resolve.
  std::variant<std::string, LaunchFailure> start_ssh_agents(const std::vector<std::string>& hosts,
                                                            const std::string& kinds,
                                                            const JobKey& key) {
    std::vector<std::string> addresses;
    for (const std::string& host : hosts) {
      auto address = rig::cli::ssh_address(host);
      if (auto* failed = std::get_if<LaunchFailure>(&address)) return *failed;
      addresses.push_back(std::get<std::string>(address));
    }
    Engine ssh{hosts,
               [&](std::size_t i, const std::vector<std::string>& rigd_args) {
                 return rig::cli::ssh_agent_argv(hosts[i], addresses[i], rigd_, rigd_args);
               },
               [&](std::size_t i, int status, int waited_ms, std::string_view said,
                   std::string_view errors) {
                 return rig::cli::ssh_start_failure(hosts[i], rigd_, status, waited_ms, said,
                                                    errors);
               }};
    return start_engine_agents(ssh, kinds, key);
  }

  // Starts an agent on each node of the Slurm allocation this process runs in, through srun;
  // start_engine_agents says the rest.
  std::variant<std::string, LaunchFailure> start_slurm_agents(const std::string& kinds,
                                                              const JobKey& key) {
    auto found = rig::cli::slurm_nodes();
    if (auto* failed = std::get_if<LaunchFailure>(&found)) return *failed;
    const auto& nodes = std::get<std::vector<rig::cli::SlurmNode>>(found);
    if (nodes.size() > static_cast<std::size_t>(agents_max)) {
      return LaunchFailure{"the allocation has " + std::to_string(nodes.size()) +
                               " nodes; rig run takes at most " + std::to_string(agents_max),
                           exit_usage};
    }
    const bool overlap = rig::cli::srun_has_overlap();
    Engine srun;
    for (const auto& n : nodes) srun.names.push_back(n.name);
    srun.argv = [&](std::size_t i, const std::vector<std::string>& rigd_args) {
      return rig::cli::slurm_agent_argv(nodes[i], rigd_, rigd_args, overlap);
    };
    srun.failed = [&](std::size_t i, int status, int waited_ms, std::string_view said,
                      std::string_view errors) {
      return rig::cli::slurm_start_failure(nodes[i].name, rigd_, status, waited_ms, said, errors);
    };
    return start_engine_agents(srun, kinds, key);
  }

  // Starts the engine's agents, all at once, and waits for each one's listening line, each within
  // agent_start_timeout_ms of the start; RIG_REMOTE_AGENTS' text for them, or why not (every
  // process started is stopped then).
  std::variant<std::string, LaunchFailure> start_engine_agents(const Engine& engine,
                                                               const std::string& kinds,
                                                               const JobKey& key) {
    const std::vector<std::string>& hosts = engine.names;
    auto failure = [&](const std::string& why) {
      stop_and_reap();
      return LaunchFailure{why, exit_failure};
    };
    auto dir = rig::cli::TempDir::make("rig-run");
    if (!dir) return failure(dir.error());
    logs_.emplace(std::move(*dir));
    std::vector<std::string> rigd_args = {"--kinds", kinds};
    if (timing_divisor_ > 1) {
      rigd_args.insert(rigd_args.end(), {"--test-timing-divisor", std::to_string(timing_divisor_)});
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(agent_start_timeout_ms);
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      Member m;
      m.name = hosts[i];
      m.session = true;
      int in[2], out[2];
      if (pipe2(in, O_CLOEXEC) != 0) return failure(std::string("pipe: ") + std::strerror(errno));
      if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return failure(std::string("pipe: ") + std::strerror(errno));
      }
      m.in_fd = in[1];
      m.out_fd = out[0];
      const std::string log_path = logs_->path() + "/" + std::to_string(i) + ".log";
      m.log_fd = open(log_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      // The key and a newline, the line rigd --watch-stdin takes, before ssh starts: 65 bytes fit
      // in any pipe's buffer. The pipe then stays open: its end is the agent's end.
      const std::string line = key.text() + "\n";
      const bool handed = m.log_fd >= 0 && write(in[1], line.data(), line.size()) ==
                                               static_cast<ssize_t>(line.size());
      const int error = errno;
      pid_t pid = -1;
      std::string spawn_error;
      if (handed) {
        rig::child::Spec spec;
        spec.argv = engine.argv(i, rigd_args);
        spec.search_path = true;
        spec.stdin_fd = in[0];
        spec.stdout_fd = out[1];
        spec.stderr_fd = m.log_fd;
        // A group of its own: a Ctrl-C at the terminal reaches rig run, which ends the session in
        // order (the end of its stdin), rather than killing ssh under the agent's report.
        spec.own_group = true;
        auto spawned = rig::child::spawn(spec);
        if (spawned) {
          pid = *spawned;
        } else {
          spawn_error = spawned.error();
        }
      }
      close(in[0]);
      close(out[1]);
      if (pid < 0) {
        for (int fd : {m.in_fd, m.out_fd, m.log_fd}) {
          if (fd >= 0) close(fd);
        }
        if (!handed) {
          return failure(m.name + ": could not hand ssh the job's key: " + std::strerror(error));
        }
        return failure(m.name + ": " + spawn_error);
      }
      watch(m, pid);
      members_.push_back(m);
    }
    std::string agents_env;
    for (Member& m : members_) {
      bool interrupted = false;
      const auto line = read_start_line(m, deadline, interrupted);
      if (interrupted) {
        stop_and_reap();
        return LaunchFailure{"interrupted while the agents started; every agent started is stopped",
                             exit_failure};
      }
      const auto at = rig::remote::parse_listening_line(line.value_or(""));
      if (at) {
        // From now on its stdout is its report: the end line its rigd writes there.
        m.report = m.out_pending;
        m.report_fd = m.out_fd;
        m.out_fd = -1;
        fcntl(m.report_fd, F_SETFL, fcntl(m.report_fd, F_GETFL) | O_NONBLOCK);
        agents_env += (agents_env.empty() ? "" : ",") + m.name + "=" +
                      rig::remote::address_text(at->host, at->port);
        continue;
      }
      // Its stdout ended (ssh has ended, or is ending), or the time is up: which, and what it
      // wrote on its stderr, say why.
      int status = -1;
      if (Clock::now() < deadline) {
        if (const auto ended = rig::child::wait_for(m.pid, static_cast<int>(bounds_.stop_ms))) {
          status = *ended;
          m.status = *ended;
          m.reaped = true;
        }
      }
      const std::size_t index = static_cast<std::size_t>(&m - members_.data());
      const LaunchFailure why =
          engine.failed(index, status, agent_start_timeout_ms, line.value_or(""), log_text(m));
      stop_and_reap();
      return why;
    }
    return agents_env;
  }

  // `m`'s next line on its stdout, as child::read_line reads it, by `deadline`; nothing at its end
  // or the deadline, or once a Ctrl-C or SIGTERM of rig run has come (`interrupted`): a start that
  // waits on a silent host is no wait the user must sit out, and no controller starts after it.
  // SIGINT and SIGTERM get through only inside ppoll, as in collect (hold_interrupts).
  static std::optional<std::string> read_start_line(Member& m, Clock::time_point deadline,
                                                    bool& interrupted) {
    const sigset_t open_mask = hold_interrupts();
    std::optional<std::string> line;
    for (;;) {
      if (const std::size_t nl = m.out_pending.find('\n'); nl != std::string::npos) {
        line = m.out_pending.substr(0, nl);
        m.out_pending.erase(0, nl + 1);
        break;
      }
      if (interrupt_count.load() > 0) {
        interrupted = true;
        break;
      }
      if (Clock::now() >= deadline) break;
      const timespec timeout = time_until(deadline);
      pollfd p{m.out_fd, POLLIN, 0};
      if (ppoll(&p, 1, &timeout, &open_mask) <= 0) continue;  // the time, or a signal: look again
      char chunk[4096];
      const ssize_t n = read(m.out_fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      m.out_pending.append(chunk, static_cast<std::size_t>(n));
    }
    pthread_sigmask(SIG_SETMASK, &open_mask, nullptr);
    return line;
  }

  // Starts `program` as the job's controller with the launcher's three variables; an Error says
  // why not (the agents are stopped then).
  rig::Result<rig::Unit> start_controller(const std::vector<std::string>& program,
                                          const std::string& agents_env,
                                          const std::string& key_text) {
    Member c;
    c.name = "controller";
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
      stop_all(SIGKILL);
      return rig::Error(std::string("pipe: ") + std::strerror(errno));
    }
    const auto pid = spawn(program,
                           {"RIG_REMOTE_AGENTS=" + agents_env, "RIG_REMOTE_KEY=" + key_text,
                            "RIG_REMOTE_REPORT=" + std::to_string(report[1])},
                           report[1], -1, -1);
    close(report[1]);
    c.report_fd = report[0];
    if (!pid) {
      close(c.report_fd);
      stop_and_reap();
      return rig::Error(pid.error());
    }
    watch(c, *pid);
    members_.insert(members_.begin(), c);
    return rig::Unit{};
  }

  // Reads every report and waits for every process to end, each wait bounded (bounds_). Once the
  // controller has ended, the agents get SIGTERM: at once if it never reported "started" (no job
  // holds them, so they would listen for ever), else those still running agent_end_ms after its
  // end. A process that got SIGTERM and has not ended stop_ms later gets SIGKILL. A Ctrl-C or
  // SIGTERM of rig run is passed on to every process as SIGINT; a second one kills them all. A
  // process is done once it is reaped: a pipe that something it left behind holds open is not
  // waited on.
  void collect() {
    // SIGINT and SIGTERM get through only inside ppoll, so that one that comes after the look at
    // interrupt_count still ends the wait.
    const sigset_t open_mask = hold_interrupts();
    for (;;) {
      reap_ended();
      if (std::ranges::all_of(members_, &Member::reaped)) break;
      pass_on_interrupts();
      apply_bounds();
      wait_for_events(open_mask);
    }
    pthread_sigmask(SIG_SETMASK, &open_mask, nullptr);
  }

  // Prints each process's end and the job's outcome with its root cause; the exit status: 0 only
  // if the job closed in order and the controller exited 0.
  int outcome() const {
    const Member& controller = members_.front();
    // The root cause: the first process's that did not close in order, the controller first (the
    // agents' ends follow from its).
    std::optional<std::string> root;
    for (const Member& m : members_) {
      const auto line = m.end_line();
      const std::string end = end_text(m);
      std::printf("rig run: %-10s %s\n", m.name.c_str(), end.c_str());
      if (root || (line == "closed" && m.stop == Stop::none)) continue;
      if (line && line->starts_with(failed_prefix)) {
        root = line->substr(failed_prefix.size());
      } else if (m.stop == Stop::interrupted) {
        root = "rig run was interrupted twice";
      } else {
        root = (&m == &controller ? "the controller " : m.name + " ") + end;
      }
    }
    // A controller that ended without a word (killed, crashed) after it had fallen silent (stopped,
    // hung): the agents' cause, its silence, came first, and its end only followed. Else the
    // operator would look for whoever sent the signal rather than at what stopped the controller.
    // Whichever agent saw the silence itself says so; the others may carry it in an abort
    // ("agent1 aborted: controller: ..."), as which agent hears it first is a race.
    if (root && !controller.end_line() && controller.stop != Stop::interrupted) {
      for (std::size_t i = 1; i < members_.size(); ++i) {
        const auto line = members_[i].end_line();
        if (!line || !line->starts_with(failed_prefix)) continue;
        const std::string cause = line->substr(failed_prefix.size());
        if (cause.starts_with("controller: sent nothing for ") ||
            cause.starts_with("controller: a send made no progress for ")) {
          root = cause;
          break;
        }
      }
    }
    const bool closed = !root;
    const bool controller_ok = WIFEXITED(controller.status) && WEXITSTATUS(controller.status) == 0;
    if (closed && controller_ok) {
      std::printf("rig run: the job closed\n");
      return exit_ok;
    }
    if (closed) {
      std::printf("rig run: the job closed, but the controller %s\n",
                  rig::cli::wait_status_text(controller.status).c_str());
      return exit_failure;
    }
    std::printf("rig run: the job failed: %s\n", root->c_str());
    return exit_failure;
  }

 private:
  // A first Ctrl-C or SIGTERM since the last look goes on to every process as SIGINT; a second
  // kills them all, and everything they started.
  void pass_on_interrupts() {
    const int interrupts = interrupt_count.load();
    if (interrupts == interrupts_seen_) return;
    if (interrupts_seen_ == 0) {
      stop_all(SIGINT);
      interrupted_at_ = Clock::now();
    }
    if (interrupts >= 2) kill_all(Stop::interrupted);
    interrupts_seen_ = interrupts;
  }

  // Sends the signals that collect's bounds call for now, and asks to be woken for the next.
  void apply_bounds() {
    const Member& controller = members_.front();
    // A first interrupt that a process does not act on (it ignores SIGINT, or it is stopped) ends
    // in SIGKILL once a job would have ended after it: the drain and a second.
    if (interrupted_at_ && !interrupts_killed_) {
      const auto due = *interrupted_at_ + std::chrono::milliseconds(bounds_.agent_end_ms);
      if (Clock::now() >= due) {
        interrupts_killed_ = true;
        kill_all(Stop::interrupt_unheeded);
      } else {
        wake_by(due);
      }
    }
    // A controller that is stopped (SIGSTOP, or Ctrl-Z of it alone) once every agent has ended
    // would hold rig run until someone continues it: the job is over, so it is killed once the
    // bound has passed since the last agent's end. A controller still running then is left to end
    // on its own, as it may have work of its own after its job.
    if (!controller.reaped && controller.stop == Stop::none && members_.size() > 1 &&
        std::all_of(members_.begin() + 1, members_.end(),
                    [](const Member& m) { return m.reaped; })) {
      Clock::time_point last{};
      for (std::size_t i = 1; i < members_.size(); ++i) last = std::max(last, members_[i].ended);
      const auto due = last + std::chrono::milliseconds(bounds_.agent_end_ms);
      if (Clock::now() < due) {
        wake_by(due);
      } else if (is_stopped(controller.pid)) {
        Member& c = members_.front();
        kill_tree(c.pid);
        c.killed = true;
        c.stop = Stop::stopped_after_agents;
      } else {
        wake_by(Clock::now() + std::chrono::milliseconds(tick_ms));
      }
    }
    if (!agents_stopped_ && controller.reaped) {
      const bool started = controller.started();
      const auto due =
          controller.ended + std::chrono::milliseconds(started ? bounds_.agent_end_ms : 0);
      if (Clock::now() >= due) {
        agents_stopped_ = true;
        for (std::size_t i = 1; i < members_.size(); ++i) {
          terminate(members_[i], started ? Stop::outlived_controller : Stop::job_not_started);
        }
      } else {
        wake_by(due);
      }
    }
    for (Member& m : members_) {
      if (m.reaped || m.stop == Stop::none || m.killed) continue;
      const auto due = m.stopped_at + std::chrono::milliseconds(bounds_.stop_ms);
      if (Clock::now() >= due) {
        send(m, SIGKILL);
        m.killed = true;
      } else {
        wake_by(due);
      }
    }
  }

  // Notes `pid` as `m`'s process, with a pidfd to wait on where the system has one (Linux 5.3;
  // without one, collect looks at the process every tick_ms), and makes its report pipe
  // non-blocking: collect reads what it holds, never waits on it.
  static void watch(Member& m, pid_t pid) {
    m.pid = pid;
    m.pid_fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    fcntl(m.report_fd, F_SETFL, fcntl(m.report_fd, F_GETFL) | O_NONBLOCK);
  }

  // What ended `m`, as printed after its name: its end line, what rig run did to it, or how its
  // process ended without an end line.
  std::string end_text(const Member& m) const {
    std::string stop;
    auto seconds = [](std::int64_t ms) {
      char text[32];
      std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms) / 1000);
      return std::string(text);
    };
    switch (m.stop) {
      case Stop::none:
        break;
      case Stop::job_not_started:
        stop = "stopped, as the job did not start";
        break;
      case Stop::outlived_controller:
        stop = "stopped, still running " + seconds(bounds_.agent_end_ms) +
               " after the controller ended";
        break;
      case Stop::interrupted:
        stop = "killed, as rig run was interrupted twice";
        break;
      case Stop::interrupt_unheeded:
        stop = "killed, still running " + seconds(bounds_.agent_end_ms) +
               " after rig run was interrupted";
        break;
      case Stop::stopped_after_agents:
        stop = "killed, stopped " + seconds(bounds_.agent_end_ms) + " after the agents ended";
        break;
    }
    // Only a SIGTERM that went unheeded ends in SIGKILL; the other stops are kills from the start.
    const bool terminated = m.stop == Stop::job_not_started || m.stop == Stop::outlived_controller;
    if (m.killed && terminated) {
      stop += " (killed " + seconds(bounds_.stop_ms) + " after SIGTERM)";
    }
    if (const auto line = m.end_line()) return stop.empty() ? *line : *line + "; " + stop;
    if (!stop.empty()) return stop;
    if (!m.wait_error.empty()) return "could not be waited for: " + m.wait_error;
    const std::string how = rig::cli::wait_status_text(m.status);
    if (&m == &members_.front() && !m.started()) return how + " before the job started";
    return how + " without reporting the job's end";
  }

  // Takes the end of every process that has ended, and what is left on its report pipe. Reaps
  // too the processes that the job's processes left behind, which come to rig run as their
  // subreaper once their parent has gone.
  void reap_ended() {
    for (;;) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
      if (std::ranges::any_of(members_, [&](const Member& m) { return m.pid == info.si_pid; })) {
        break;  // one of the job's own processes: taken below, with its status
      }
      waitpid(info.si_pid, nullptr, WNOHANG);
    }
    for (Member& m : members_) {
      if (m.reaped) continue;
      const pid_t got = waitpid(m.pid, &m.status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      if (got < 0) m.wait_error = std::strerror(errno);  // not with SIGCHLD at its default
      m.reaped = true;
      m.ended = Clock::now();
      read_report(m);  // what it wrote before it ended is in the pipe now
      pass_on_log(m);
      for (int* fd : {&m.report_fd, &m.pid_fd, &m.out_fd, &m.in_fd, &m.log_fd}) {
        if (*fd >= 0) close(*fd);
        *fd = -1;
      }
    }
  }

  // Reads what `m`'s report pipe holds now, without waiting; closes it at its end.
  static void read_report(Member& m) {
    while (m.report_fd >= 0) {
      char buf[4096];
      const ssize_t n = read(m.report_fd, buf, sizeof buf);
      if (n > 0) {
        const std::size_t room = report_bytes_max - std::min(m.report.size(), report_bytes_max);
        m.report.append(buf, std::min(static_cast<std::size_t>(n), room));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return;
      } else {
        close(m.report_fd);
        m.report_fd = -1;
      }
    }
  }

  // Waits until a process ends, a report pipe has something, an interrupt comes or wake_by's
  // time; reads the reports that have something.
  void wait_for_events(const sigset_t& open_mask) {
    std::vector<pollfd> fds;
    std::vector<Member*> reports;
    bool unwatched = false;
    for (Member& m : members_) {
      if (m.reaped) continue;
      if (m.pid_fd >= 0) fds.push_back({m.pid_fd, POLLIN, 0});
      unwatched = unwatched || m.pid_fd < 0;
      if (m.report_fd >= 0) {
        fds.push_back({m.report_fd, POLLIN, 0});
        reports.push_back(&m);
      }
    }
    if (unwatched) wake_by(Clock::now() + std::chrono::milliseconds(tick_ms));
    timespec timeout{};
    const timespec* bound = nullptr;  // no time of its own: only an event ends the wait
    if (wake_at_) {
      timeout = time_until(*wake_at_);
      bound = &timeout;
      wake_at_.reset();
    }
    if (ppoll(fds.data(), fds.size(), bound, &open_mask) <= 0) return;  // a time, or a signal
    for (Member* m : reports) read_report(*m);
  }
  void wake_by(Clock::time_point t) {
    if (!wake_at_ || t < *wake_at_) wake_at_ = t;
  }

  // Sends `m` `sig`; for an ssh or srun agent, a SIGINT or SIGTERM is the end of its session's
  // stdin, which stops its rigd in order (rigd --watch-stdin) and lets its report come back over
  // ssh. ssh itself gets only SIGKILL, for one that has not ended stop_ms after its stdin's end.
  static void send(Member& m, int sig) {
    if (m.session && sig != SIGKILL) {
      if (m.in_fd >= 0) close(m.in_fd);
      m.in_fd = -1;
      return;
    }
    kill(m.pid, sig);
  }

  // What an ssh or srun agent has written on its stderr, its last agent_log_bytes_max bytes; empty
  // for another process.
  static std::string log_text(const Member& m) {
    if (m.log_fd < 0) return {};
    const off_t size = lseek(m.log_fd, 0, SEEK_END);
    const off_t from = std::max<off_t>(0, size - static_cast<off_t>(agent_log_bytes_max));
    std::string text(static_cast<std::size_t>(std::max<off_t>(size - from, 0)), '\0');
    const ssize_t n = pread(m.log_fd, text.data(), text.size(), from);
    text.resize(static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    return text;
  }

  // An ssh or srun agent's log, once it has ended, on rig run's stderr, each line after its host's
  // name: what its rigd said, as rigd's log is for a local agent.
  static void pass_on_log(const Member& m) {
    if (m.log_fd < 0) return;
    const std::string text = log_text(m);
    for (std::string_view line : lines_of(text)) {
      std::fprintf(stderr, "%s: %s\n", m.name.c_str(), rig::remote::printable_once(line).c_str());
    }
  }

  // Sends `m` SIGTERM, for `why`, if it is still running and has not had one.
  void terminate(Member& m, Stop why) {
    if (m.reaped || m.stop != Stop::none) return;
    send(m, SIGTERM);
    m.stop = why;
    m.stopped_at = Clock::now();
  }
  // Kills every process still running, and everything the job's processes started: their
  // descendants, and the orphans left to rig run as their subreaper.
  void kill_all(Stop why) {
    for (Member& m : members_) {
      if (m.reaped || m.killed) continue;
      m.killed = true;
      if (m.stop == Stop::none) m.stop = why;
    }
    kill_tree(getpid(), false);
  }
  // Whether `pid` is stopped by a signal (state T in /proc/PID/stat).
  static bool is_stopped(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t paren = stat.rfind(')');  // the command's name may hold anything
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
  }
  // SIGKILL to `root` (unless !with_root) and every descendant of it: the whole tree is listed
  // first (a process killed first would hand its children to rig run), then killed.
  static void kill_tree(pid_t root, bool with_root = true) {
    std::vector<pid_t> tree = {root};
    for (std::size_t i = 0; i < tree.size() && tree.size() < descendants_max; ++i) {
      std::error_code ec;
      const std::string tasks = "/proc/" + std::to_string(tree[i]) + "/task";
      for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
        std::ifstream in(task.path() / "children");
        for (pid_t child; in >> child;) tree.push_back(child);
      }
    }
    for (std::size_t i = with_root ? 0 : 1; i < tree.size(); ++i) kill(tree[i], SIGKILL);
  }
  void stop_all(int sig) {
    for (Member& m : members_) {
      if (m.pid > 0 && !m.reaped) send(m, sig);
    }
  }
  // Stops every process still running, SIGKILL after stop_ms for one that does not end, and
  // reaps them: the way out when the job cannot start.
  void stop_and_reap() {
    stop_all(SIGTERM);
    const auto until = Clock::now() + std::chrono::milliseconds(bounds_.stop_ms);
    for (Member& m : members_) {
      if (m.reaped || m.pid <= 0) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (const auto status = rig::child::wait_for(
              m.pid, static_cast<int>(std::max<std::int64_t>(left.count(), 0)))) {
        m.status = *status;
        m.reaped = true;
      } else {
        send(m, SIGKILL);
      }
    }
    reap_all();
  }
  void reap_all() {
    for (Member& m : members_) {
      if (m.reaped || m.pid <= 0) continue;
      while (waitpid(m.pid, &m.status, 0) < 0 && errno == EINTR) {
      }
      m.reaped = true;
    }
    for (Member& m : members_) {
      for (int* fd : {&m.report_fd, &m.pid_fd, &m.out_fd, &m.in_fd, &m.log_fd}) {
        if (*fd >= 0) close(*fd);
        *fd = -1;
      }
    }
  }

  const std::string rigd_;
  const int timing_divisor_;
  const Bounds bounds_;
  std::vector<Member> members_;
  // The ssh or srun agents' stderr files, removed at the end.
  std::optional<rig::cli::TempDir> logs_;
  std::optional<Clock::time_point> wake_at_;         // the next time collect must look, if any
  int interrupts_seen_ = 0;                          // of interrupt_count, passed on already
  std::optional<Clock::time_point> interrupted_at_;  // the first interrupt's time
  bool interrupts_killed_ = false;  // the first interrupt's bound has passed, and killed
  bool agents_stopped_ = false;     // collect has sent the agents SIGTERM
};

}  // namespace

int cmd_run(std::span<char*> args) {
  auto parsed = parse_options(args);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const RunOptions& o = std::get<RunOptions>(parsed);

  JobKey key;
  if (auto made = key.make(); !made) {
    std::fprintf(stderr, "rig run: %s\n", made.error().c_str());
    return exit_failure;
  }

  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  // The processes' ends must be ours to take: with an inherited SIG_IGN the kernel reaps them.
  struct sigaction chld {};
  chld.sa_handler = SIG_DFL;
  sigemptyset(&chld.sa_mask);
  sigaction(SIGCHLD, &chld, nullptr);

  // What the job's processes leave behind comes to rig run, so that an interrupt that kills them
  // all finds it (kill_all), and nothing it started outlives rig run's second Ctrl-C.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  Launch launch(rigd_path(o.rigd), o.timing_divisor);
  std::string agents_env;
  if (o.local > 0) {
    auto local = launch.start_agents(o.local, o.kinds, key);
    if (!local) {
      std::fprintf(stderr, "rig run: %s\n", local.error().c_str());
      return exit_failure;
    }
    agents_env = *local;
  } else {
    auto remote = o.slurm ? launch.start_slurm_agents(o.kinds, key)
                          : launch.start_ssh_agents(o.ssh, o.kinds, key);
    if (const auto* failed = std::get_if<LaunchFailure>(&remote)) {
      std::fprintf(stderr, "rig run: %s\n", failed->message.c_str());
      return failed->exit_status;
    }
    agents_env = std::get<std::string>(remote);
  }
  if (auto started = launch.start_controller(o.program, agents_env, key.text()); !started) {
    std::fprintf(stderr, "rig run: %s\n", started.error().c_str());
    return exit_failure;
  }
  key.wipe();
  launch.collect();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return launch.outcome();
}
