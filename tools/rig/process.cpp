#include "process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "child/child.hpp"

namespace rig::cli {

Result<TempDir> TempDir::make(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  std::string templ = parent + "/" + std::string(prefix) + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return Error("cannot make a temporary directory in " + parent + ": " + std::strerror(errno));
  }
  return TempDir(std::move(templ));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;  // nothing useful to do about a failure on the way out
  std::filesystem::remove_all(path_, ignored);
}

Interrupts::Interrupts() {
  sigemptyset(&held_);
  sigaddset(&held_, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal the user set to be ignored (nohup's SIGHUP) stays ignored: Linux would queue it
    // while blocked, and sigwaitinfo would then take it as a request to stop.
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler != SIG_IGN) sigaddset(&held_, sig);
  }
  pthread_sigmask(SIG_BLOCK, &held_, &previous_);
  // Children must be reapable: an inherited SIG_IGN for SIGCHLD would make the kernel reap them
  // and waitpid fail.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &previous_chld_);
}

Interrupts::~Interrupts() {
  sigaction(SIGCHLD, &previous_chld_, nullptr);
  if (taken_ != 0) {
    // Once unblocked, the re-raised signal ends the process with its usual status (130 for
    // Ctrl-C in a shell); if the user's disposition ignores it, the command returns as usual.
    ::raise(taken_);
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

bool JobEnd::succeeded() const {
  return started && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string wait_status_text(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

std::string JobEnd::describe() const {
  return started ? wait_status_text(wait_status) : start_error;
}

Captured capture(const std::vector<std::string>& argv, int timeout_ms) {
  Captured c;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    c.error = std::string("pipe: ") + std::strerror(errno);
    return c;
  }
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  child::Spec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.stdin_fd = in;
  spec.stdout_fd = out[1];
  spec.stderr_fd = out[1];
  const auto pid = child::spawn(spec);
  close(out[1]);
  if (in >= 0) close(in);
  if (!pid) {
    close(out[0]);
    c.error = pid.error();
    return c;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<std::int64_t>(left.count(), 1));
  };
  std::string pending;
  while (const auto line = child::read_line(out[0], pending, left_ms())) c.text += *line + "\n";
  c.text += pending;
  close(out[0]);
  c.wait_status = child::wait_for(*pid, left_ms());
  if (!c.wait_status) {
    kill(*pid, SIGKILL);
    (void)child::wait_exit(*pid);
    c.error = "'" + argv[0] + "' did not end within " + std::to_string(timeout_ms / 1000) + " s";
  }
  return c;
}

namespace {

// Starts `job` as run_jobs's header says; the pid, or why it could not run.
Result<pid_t> start(const Job& job) {
  const std::string cannot = "cannot run '" + job.argv[0] + "': ";
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) return Error(cannot + "/dev/null: " + std::strerror(errno));
  const int log = ::open(job.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) {
    const int e = errno;
    close(in);
    return Error(cannot + job.log_path + ": " + std::strerror(e));
  }
  child::Spec spec;
  spec.argv = job.argv;
  spec.search_path = true;
  spec.stdin_fd = in;
  spec.stdout_fd = log;
  spec.stderr_fd = log;
  // A process group of its own, so that stopping a job stops everything it started (a compiler
  // driver's cc1 and ld, a wrapper script's children).
  spec.own_group = true;
  // The child starts with nothing blocked: our held signals are ours, not the compiler's.
  spec.unblock_signals = true;
  auto pid = child::spawn(spec);
  close(in);
  close(log);
  return pid;
}

struct Running {
  pid_t pid;
  std::size_t job;
};

}  // namespace

std::vector<JobEnd> run_jobs(const std::vector<Job>& jobs, std::size_t parallel_max,
                             Interrupts& interrupts) {
  if (parallel_max == 0) parallel_max = 1;
  std::vector<JobEnd> ends(jobs.size());
  std::vector<Running> running;
  std::size_t next = 0;
  bool failed = false;
  for (;;) {
    while (!failed && running.size() < parallel_max && next < jobs.size()) {
      const std::size_t i = next++;
      if (jobs[i].argv.empty()) {
        ends[i].start_error = "an empty command";
        failed = true;
        break;
      }
      const auto pid = start(jobs[i]);
      if (!pid) {
        ends[i].start_error = pid.error();
        failed = true;
        break;
      }
      ends[i].started = true;
      running.push_back({*pid, i});
    }
    if (running.empty()) break;

    siginfo_t info;
    const int sig = sigwaitinfo(&interrupts.held(), &info);
    if (sig < 0) continue;  // EINTR from a signal we do not hold; look again
    if (sig != SIGCHLD) {
      interrupts.take(sig);
      for (const Running& r : running) ::kill(-r.pid, SIGTERM);
      for (const Running& r : running) {
        while (::waitpid(r.pid, &ends[r.job].wait_status, 0) < 0 && errno == EINTR) {
        }
      }
      break;
    }
    // One SIGCHLD may stand for several exits; look at every child.
    for (std::size_t k = 0; k < running.size();) {
      int status = 0;
      const pid_t got = ::waitpid(running[k].pid, &status, WNOHANG);
      if (got == running[k].pid || (got < 0 && errno != EINTR)) {
        JobEnd& end = ends[running[k].job];
        if (got < 0) {
          end.started = false;  // cannot happen with SIGCHLD at its default; never spin on it
          end.start_error = std::string("waiting for it failed: ") + std::strerror(errno);
        } else {
          end.wait_status = status;
        }
        if (!end.succeeded()) failed = true;
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        ++k;
      }
    }
  }
  return ends;
}

}  // namespace rig::cli
