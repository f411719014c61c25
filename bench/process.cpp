#include "process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "child/child.hpp"

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
    if (err_fd < 0) {
      const int e = errno;
      if (out[0] >= 0) close(out[0]);
      if (out[1] >= 0) close(out[1]);
      return Error("cannot open " + err_path + ": " + std::strerror(e));
    }
  }
  child::Spec spec;
  spec.argv = argv;
  spec.env = env;
  spec.stdout_fd = out[1];
  spec.stderr_fd = err_fd;
  spec.cpu = cpu;
  const auto pid = child::spawn(spec);
  if (out[1] >= 0) close(out[1]);
  if (err_fd >= 0) close(err_fd);
  if (!pid) {
    if (out[0] >= 0) close(out[0]);
    return Error(pid.error());
  }
  Child c;
  c.pid = *pid;
  c.out_fd = out[0];
  return c;
}

std::optional<std::string> Child::line(int timeout_ms) {
  return child::read_line(out_fd, out_pending, timeout_ms);
}

std::string Child::rest() {
  return child::read_all(out_fd, std::exchange(out_pending, {}));
}

int wait_exit(Child& c) {
  const int status = child::wait_exit(c.pid);
  c.pid = -1;
  if (c.out_fd >= 0) close(c.out_fd);
  c.out_fd = -1;
  return status;
}

void stop(Child& c, int sig, int wait_ms) {
  if (c.pid <= 0) return;
  kill(c.pid, sig);
  if (!child::wait_for(c.pid, wait_ms)) {
    kill(c.pid, SIGKILL);
    (void)child::wait_exit(c.pid);
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

std::vector<pid_t> descendants_of(pid_t pid) {
  std::vector<pid_t> out = children_of(pid);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto more = children_of(out[i]);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::vector<ThreadCounts> thread_counts(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::vector<ThreadCounts> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = dir + "/" + e->d_name;
    ThreadCounts t;
    t.pid = pid;
    t.tid = static_cast<pid_t>(std::atoll(e->d_name));
    std::ifstream sched(task + "/schedstat");
    if (!(sched >> t.run_ns >> t.wait_ns >> t.slices)) continue;  // ended meanwhile
    std::ifstream comm(task + "/comm");
    std::getline(comm, t.name);
    std::ifstream status(task + "/status");
    std::string key;
    while (status >> key) {
      if (key == "voluntary_ctxt_switches:") status >> t.voluntary;
      if (key == "nonvoluntary_ctxt_switches:") status >> t.involuntary;
      status.ignore(4096, '\n');
    }
    out.push_back(std::move(t));
  }
  closedir(d);
  return out;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  pid_t c;
  while (f >> c) out.push_back(c);
  return out;
}

}  // namespace rig::bench
