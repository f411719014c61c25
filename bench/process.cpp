#include "process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

namespace rig::bench {

Result<Child> spawn(const std::vector<std::string>& argv, int cpu, bool capture_stdout,
                    const std::string& err_path, const std::vector<std::string>& env) {
  int out[2] = {-1, -1};
  if (capture_stdout && pipe2(out, O_CLOEXEC) != 0) {
    return Error(std::string("pipe: ") + std::strerror(errno));
  }
  int err_fd = -1;
  if (!err_path.empty()) {
    err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err_fd < 0) return Error("cannot open " + err_path + ": " + std::strerror(errno));
  }
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Our environment without the names `env` sets, then `env`.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& x) {
      const auto eq = x.find('=');
      return entry.substr(0, entry.find('=')) == std::string_view(x).substr(0, eq);
    });
    if (!replaced) envp.push_back(*e);
  }
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu >= 0) CPU_SET(cpu, &set);
  const pid_t pid = fork();
  if (pid < 0) return Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (cpu >= 0 && sched_setaffinity(0, sizeof set, &set) != 0) _exit(126);
    if (out[1] >= 0) dup2(out[1], STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (out[1] >= 0) close(out[1]);
  if (err_fd >= 0) close(err_fd);
  return Child{pid, out[0]};
}

std::optional<std::string> read_line(int fd, int timeout_ms) {
  std::string buf;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    // One byte at a time: what follows the line stays in the pipe for the next reader.
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return std::nullopt;
    if (c == '\n') return buf;
    buf.push_back(c);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

int wait_exit(Child& c) {
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.pid = -1;
  if (c.out_fd >= 0) close(c.out_fd);
  c.out_fd = -1;
  return status;
}

void stop(Child& c, int sig, int wait_ms) {
  if (c.pid <= 0) return;
  kill(c.pid, sig);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  int status = 0;
  while (waitpid(c.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= until) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  c.pid = -1;
  if (c.out_fd >= 0) close(c.out_fd);
  c.out_fd = -1;
}

bool pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::optional<std::uint64_t> cpu_ns_schedstat(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  std::uint64_t total = 0;
  bool any = false;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name + "/schedstat");
    std::uint64_t run_ns = 0;
    if (f >> run_ns) {
      total += run_ns;
      any = true;
    }
  }
  closedir(d);
  if (!any) return std::nullopt;
  return total;
}

std::optional<std::uint64_t> cpu_ns_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  // The command name may hold spaces and parentheses: fields are counted after the last ')'.
  const auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close_paren + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  // Field 3 (state) is the first after the name; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  return (utime + stime) * (1'000'000'000ull / static_cast<std::uint64_t>(ticks_per_s));
}

std::uint64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmRSS:") {
      std::uint64_t kib = 0;
      f >> kib;
      return kib * 1024;
    }
    f.ignore(4096, '\n');
  }
  return 0;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  pid_t c;
  while (f >> c) out.push_back(c);
  return out;
}

}  // namespace rig::bench
