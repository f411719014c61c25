#include "child/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

extern char** environ;

namespace rig::child {
namespace {

// How often wait_for looks whether the child has ended.
constexpr auto wait_poll_interval = std::chrono::milliseconds(2);

// What a child that could not exec writes on the status pipe before it exits.
enum class Step : int { exec, affinity, descriptors };
struct Failure {
  Step step;
  int error;
};

std::string_view name_of(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

// The file execvp would run for `name`: the first executable regular file of that name in PATH.
// Resolved before the fork, where a search may allocate. Error: the text of the errno execvp
// would give.
Result<std::string> find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  int error = ENOENT;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";  // an empty entry is the working directory, as for execvp
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      error = EACCES;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return Error(std::strerror(error));
}

// In the child: only async-signal-safe calls from here to the exec or _exit.
[[noreturn]] void fail_in_child(int status_fd, Step step) {
  const Failure f{step, errno};
  (void)!write(status_fd, &f, sizeof f);
  _exit(127);
}

bool move_fd(int from, int to) {
  if (from < 0) return true;
  if (from == to) return fcntl(to, F_SETFD, 0) == 0;  // dup2 onto itself keeps close-on-exec
  return dup2(from, to) == to;
}

}  // namespace

std::vector<std::string> environment_with(const std::vector<std::string>& changes) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool changed = false;
    for (const std::string& c : changes) changed = changed || name_of(c) == name_of(entry);
    if (!changed) out.emplace_back(entry);
  }
  for (const std::string& c : changes) {
    if (c.find('=') != std::string::npos) out.push_back(c);
  }
  return out;
}

Result<pid_t> spawn(const Spec& spec) {
  if (spec.argv.empty()) return Error("cannot run an empty command");
  const std::string& name = spec.argv[0];
  std::string file = spec.file.empty() ? name : spec.file;
  if (spec.file.empty() && spec.search_path && name.find('/') == std::string::npos) {
    auto found = find_in_path(name);
    if (!found) return Error("cannot run '" + name + "': " + found.error());
    file = *found;
  }
  // Everything the child touches, made before the fork.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env = environment_with(spec.env);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (spec.cpu >= 0) CPU_SET(spec.cpu, &cpus);
  sigset_t none;
  sigemptyset(&none);
  const pid_t parent = getpid();

  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) {
    return Error("cannot run '" + name + "': pipe: " + std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(status[0]);
    close(status[1]);
    return Error("cannot run '" + name + "': fork: " + std::strerror(e));
  }
  if (pid == 0) {
    if (spec.own_group) setpgid(0, 0);
    if (spec.parent_death_signal > 0) {
      prctl(PR_SET_PDEATHSIG, spec.parent_death_signal);
      if (getppid() != parent) _exit(1);  // the parent went before the signal was asked for
    }
    if (spec.unblock_signals) sigprocmask(SIG_SETMASK, &none, nullptr);
    if (spec.cpu >= 0 && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      fail_in_child(status[1], Step::affinity);
    }
    if (!move_fd(spec.stdin_fd, STDIN_FILENO) || !move_fd(spec.stdout_fd, STDOUT_FILENO) ||
        !move_fd(spec.stderr_fd, STDERR_FILENO)) {
      fail_in_child(status[1], Step::descriptors);
    }
    for (int fd : spec.keep_fds) {
      if (fcntl(fd, F_SETFD, 0) != 0) fail_in_child(status[1], Step::descriptors);
    }
    execve(file.c_str(), argv.data(), envp.data());
    fail_in_child(status[1], Step::exec);
  }
  close(status[1]);
  // The write end closes at the exec: end of file is success, a record the child's failure.
  Failure f{};
  ssize_t n;
  while ((n = read(status[0], &f, sizeof f)) < 0 && errno == EINTR) {
  }
  close(status[0]);
  if (n != static_cast<ssize_t>(sizeof f)) return pid;
  (void)wait_exit(pid);
  const std::string why = std::strerror(f.error);
  switch (f.step) {
    case Step::affinity:
      return Error("cannot run '" + name + "' on core " + std::to_string(spec.cpu) + ": " + why);
    case Step::descriptors:
      return Error("cannot run '" + name + "': its descriptors: " + why);
    case Step::exec:
      break;
  }
  return Error("cannot run '" + name + "': " + why);
}

std::optional<std::string> read_line(int fd, std::string& pending, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const std::size_t nl = pending.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;  // a timeout or EINTR: look again
    char chunk[4096];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    pending.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string read_all(int fd, std::string pending) {
  std::string out = std::move(pending);
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::optional<int> wait_for(pid_t pid, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;  // not our child (reaped already)
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(wait_poll_interval);
  }
}

}  // namespace rig::child
