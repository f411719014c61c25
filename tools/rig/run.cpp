// rig run --local N [--kinds K] [--rigd PATH] -- PROGRAM ARGS...
//
// Starts N agents (rigd --once) on loopback with a fresh key, then PROGRAM as the job's controller
// with RIG_REMOTE_AGENTS, RIG_REMOTE_KEY and RIG_REMOTE_REPORT; reads every process's report line,
// prints each process's end and the job's outcome with its root cause, and exits 0 only if the job
// closed in order and the controller exited 0.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "child/child.hpp"
#include "commands.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"

namespace {

using rig::cli::exit_failure;
using rig::cli::exit_ok;
using rig::cli::exit_usage;

constexpr int agents_max = 64;
// An agent that has not printed its listening line by then did not start.
constexpr int agent_start_timeout_ms = 10'000;
constexpr std::size_t key_bytes = 32;  // 64 hexadecimal characters in RIG_REMOTE_KEY

const char* const usage_text =
    "usage: rig run --local N [--kinds CPU,SIM,CUDA] [--rigd PATH] -- PROGRAM [ARGS...]\n"
    "  Starts N agents on this machine (loopback) with a fresh key, then PROGRAM as the job's\n"
    "  controller; prints how each process ended and the job's root cause.\n";

int usage(const std::string& why) {
  std::fprintf(stderr, "rig run: %s\n%s", why.c_str(), usage_text);
  return exit_usage;
}

// One process of the job, as the launcher sees it.
struct Member {
  std::string name;
  pid_t pid = -1;
  int report_fd = -1;       // read end of its report pipe
  int out_fd = -1;          // an agent's stdout, for its listening line
  std::string out_pending;  // what was read from out_fd past its listening line
  std::string report;       // what it reported
  bool report_done = false;
  int status = 0;
  bool reaped = false;
};

// Spawns argv (looked up in PATH) with `env` set in its environment, the write end `report_w` of
// its report pipe kept open in it, and its stdout on `out_w` when that is not -1.
rig::Result<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int report_w, int out_w) {
  rig::child::Spec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.env = env;
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

std::atomic<int> interrupt_signal{0};
void on_interrupt(int sig) {
  interrupt_signal.store(sig);
}

// What the command line asks for.
struct RunOptions {
  int local = 0;
  std::string kinds = "CPU,SIM";
  std::optional<std::string> rigd;
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
    } else if (a == "--kinds") {
      auto v = value();
      if (!v) return usage("--kinds needs a list");
      o.kinds = *v;
    } else if (a == "--rigd") {
      o.rigd = value();
      if (!o.rigd) return usage("--rigd needs a path");
    } else if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      return exit_ok;
    } else {
      return usage("unknown argument '" + a + "'");
    }
  }
  if (o.local == 0) return usage("say how many local agents: --local N");
  if (o.program.empty()) return usage("no PROGRAM after --");
  return o;
}

// A fresh job key: 32 random bytes as 64 hexadecimal characters, which are themselves the key's
// bytes. Owner: the launcher; its text is wiped when it goes.
class JobKey {
 public:
  JobKey() = default;
  JobKey(const JobKey&) = delete;
  JobKey& operator=(const JobKey&) = delete;
  ~JobKey() { wipe(); }

  // Draws the key and writes it to `file` (created, mode 0600); an Error says why not.
  rig::Result<rig::Unit> make(const std::string& file) {
    if (sodium_init() < 0) return rig::Error("libsodium failed to initialise");
    unsigned char raw[key_bytes];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(hex_, sizeof hex_, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, hex_, 2 * key_bytes) != static_cast<ssize_t>(2 * key_bytes)) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) close(fd);
      return rig::Error("cannot write the job's key: " + why);
    }
    close(fd);
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
  explicit Launch(std::string rigd) : rigd_(std::move(rigd)) {}

  // Starts `count` agents, each on loopback, port 0, and waits for each one's listening line;
  // RIG_REMOTE_AGENTS' text for them, or an Error (every process started is stopped).
  rig::Result<std::string> start_agents(int count, const std::string& kinds,
                                        const std::string& key_file) {
    std::string agents_env;
    for (int i = 0; i < count; ++i) {
      Member m;
      m.name = "agent" + std::to_string(i);
      int report[2], out[2];
      if (pipe2(report, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        stop_all(SIGKILL);
        return rig::Error(std::string("pipe: ") + std::strerror(errno));
      }
      const auto pid =
          spawn({rigd_, "--key", key_file, "--listen", "127.0.0.1:0", "--kinds", kinds, "--once"},
                {"RIG_REMOTE_REPORT=" + std::to_string(report[1])}, report[1], out[1]);
      close(report[1]);
      close(out[1]);
      m.report_fd = report[0];
      m.out_fd = out[0];
      if (!pid) {
        stop_all(SIGKILL);
        return rig::Error(m.name + " could not start: " + pid.error());
      }
      m.pid = *pid;
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
                           report[1], -1);
    close(report[1]);
    c.report_fd = report[0];
    if (!pid) {
      stop_all(SIGTERM);
      reap_all();
      return rig::Error(pid.error());
    }
    c.pid = *pid;
    members_.insert(members_.begin(), c);
    return rig::Unit{};
  }

  // Reads every report until its pipe closes (a Ctrl-C or SIGTERM of this launcher is passed on
  // as SIGINT, once), then reaps every process.
  void collect() {
    bool passed_on = false;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Member*> who;
      for (Member& m : members_) {
        if (!m.report_done) {
          fds.push_back({m.report_fd, POLLIN, 0});
          who.push_back(&m);
        }
      }
      if (fds.empty()) break;
      if (interrupt_signal.load() != 0 && !passed_on) {
        passed_on = true;
        stop_all(SIGINT);
      }
      if (poll(fds.data(), fds.size(), 200) <= 0) continue;
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        char buf[4096];
        const ssize_t n = read(fds[k].fd, buf, sizeof buf);
        if (n <= 0) {
          who[k]->report_done = true;
          close(fds[k].fd);
        } else {
          who[k]->report.append(buf, static_cast<std::size_t>(n));
        }
      }
    }
    reap_all();
  }

  // Prints each process's end (the last line of its report; the controller's first is
  // "started") and the job's outcome; the exit status: 0 only if the job closed in order and the
  // controller exited 0.
  int outcome() const {
    std::optional<std::string> root;
    bool closed = true;
    for (const Member& m : members_) {
      std::string end = m.report;
      while (!end.empty() && end.back() == '\n') end.pop_back();
      const auto nl = end.rfind('\n');
      if (nl != std::string::npos) end = end.substr(nl + 1);
      if (end.empty() || end == "started") {
        end = WIFSIGNALED(m.status)
                  ? "ended by signal " + std::to_string(WTERMSIG(m.status))
                  : "exited with status " + std::to_string(WEXITSTATUS(m.status)) +
                        " without reporting the job's end";
        closed = false;
        if (!root) root = m.name + " " + end;
      } else if (end.rfind("failed ", 0) == 0) {
        closed = false;
        if (!root || m.name == "controller") root = end.substr(std::strlen("failed "));
      }
      std::printf("rig run: %-10s %s\n", m.name.c_str(), end.c_str());
    }
    const Member& controller = members_.front();
    const bool controller_ok = WIFEXITED(controller.status) && WEXITSTATUS(controller.status) == 0;
    if (closed && controller_ok) {
      std::printf("rig run: the job closed\n");
      return exit_ok;
    }
    if (closed) {
      std::printf(
          "rig run: the job closed, but the controller %s\n",
          WIFSIGNALED(controller.status)
              ? ("ended by signal " + std::to_string(WTERMSIG(controller.status))).c_str()
              : ("exited with status " + std::to_string(WEXITSTATUS(controller.status))).c_str());
      return exit_failure;
    }
    std::printf("rig run: the job failed: %s\n", root ? root->c_str() : "no process said why");
    return exit_failure;
  }

 private:
  void stop_all(int sig) {
    for (Member& m : members_) {
      if (m.pid > 0 && !m.reaped) kill(m.pid, sig);
    }
  }
  void reap_all() {
    for (Member& m : members_) {
      if (m.reaped || m.pid <= 0) continue;
      while (waitpid(m.pid, &m.status, 0) < 0 && errno == EINTR) {
      }
      m.reaped = true;
      if (m.out_fd >= 0) close(m.out_fd);
    }
  }

  const std::string rigd_;
  std::vector<Member> members_;
};

}  // namespace

int cmd_run(std::span<char*> args) {
  auto parsed = parse_options(args);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const RunOptions& o = std::get<RunOptions>(parsed);

  auto dir = rig::cli::TempDir::make("rig-run");
  if (!dir) {
    std::fprintf(stderr, "rig run: %s\n", dir.error().c_str());
    return exit_failure;
  }
  const std::string key_file = dir->path() + "/job.key";
  JobKey key;
  if (auto made = key.make(key_file); !made) {
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

  Launch launch(rigd_path(o.rigd));
  auto agents_env = launch.start_agents(o.local, o.kinds, key_file);
  if (!agents_env) {
    std::fprintf(stderr, "rig run: %s\n", agents_env.error().c_str());
    return exit_failure;
  }
  if (auto started = launch.start_controller(o.program, *agents_env, key.text()); !started) {
    std::fprintf(stderr, "rig run: %s\n", started.error().c_str());
    return exit_failure;
  }
  key.wipe();
  launch.collect();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return launch.outcome();
}
