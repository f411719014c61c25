// What a process holds, read from /proc/PID (resident memory, descriptors, threads, CPU time), and
// the descriptor limits of this test process and of the processes it starts.
#pragma once

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rig::test {

// What a process holds now, from /proc/PID.
struct Holdings {
  std::int64_t rss_kib = 0;   // VmRSS
  std::int64_t peak_kib = 0;  // VmHWM: the most it was ever resident
  std::size_t descriptors = 0;
  std::size_t sockets = 0;  // of the descriptors
  std::size_t threads = 0;
};

// How many entries directory `dir` has (a process's descriptors, its threads).
inline std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

inline Holdings holdings(pid_t pid) {
  Holdings h;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);) {
    std::istringstream fields(line);
    std::string name;
    std::int64_t kib = 0;
    fields >> name >> kib;
    if (name == "VmRSS:") h.rss_kib = kib;
    if (name == "VmHWM:") h.peak_kib = kib;
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++h.descriptors;
    std::error_code link_ec;
    if (std::filesystem::read_symlink(it->path(), link_ec).string().starts_with("socket:")) {
      ++h.sockets;
    }
  }
  h.threads = entries(proc + "/task");
  return h;
}

// The CPU time process `pid` has used, in seconds (user and system, /proc/PID/stat).
inline double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The lowest descriptor number free in process `pid`: with its limit there, its next open fails.
inline rlim_t lowest_free_descriptor(pid_t pid) {
  std::vector<bool> used;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    const auto fd = std::stoul(e.path().filename().string());
    if (fd >= used.size()) used.resize(fd + 1);
    used[fd] = true;
  }
  rlim_t fd = 0;
  while (fd < used.size() && used[fd]) ++fd;
  return fd;
}

// Polls `holds` until it is true or `ms` have passed; whether it became true.
template <typename Pred>
bool within(int ms, Pred holds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!holds()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// This test process may open as many descriptors as its hard limit allows: thousands of strangers
// need thousands of sockets here too.
inline void raise_descriptor_limit() {
  rlimit r{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &r) == 0);
  r.rlim_cur = r.rlim_max;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &r) == 0);
}

// The processes started within the scope (rigd, and the job processes it starts) may open at most
// `soft` descriptors (their soft limit); this test process's own limit comes back at its end.
// Owner: the test's stack frame, on the thread that starts them.
class ChildDescriptorLimit {
 public:
  explicit ChildDescriptorLimit(rlim_t soft) {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &normal_) == 0);
    rlimit tight = normal_;
    tight.rlim_cur = soft;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  }
  ~ChildDescriptorLimit() { setrlimit(RLIMIT_NOFILE, &normal_); }
  ChildDescriptorLimit(const ChildDescriptorLimit&) = delete;
  ChildDescriptorLimit& operator=(const ChildDescriptorLimit&) = delete;

 private:
  rlimit normal_{};
};

// Leaves process `pid` (a job process that is running) not one descriptor more than it holds now:
// its soft limit is its lowest free descriptor, until give_back() or the end of the scope.
// Owner: the test's stack frame; its thread.
class NoDescriptorLeft {
 public:
  explicit NoDescriptorLeft(pid_t pid) : pid_(pid) {
    REQUIRE(prlimit(pid_, RLIMIT_NOFILE, nullptr, &normal_) == 0);
    rlimit tight = normal_;
    tight.rlim_cur = lowest_free_descriptor(pid_);
    REQUIRE(prlimit(pid_, RLIMIT_NOFILE, &tight, nullptr) == 0);
  }
  ~NoDescriptorLeft() { (void)give_back(); }
  NoDescriptorLeft(const NoDescriptorLeft&) = delete;
  NoDescriptorLeft& operator=(const NoDescriptorLeft&) = delete;

  // The process's limit as it was; whether it could be given back (once: later calls say true).
  bool give_back() {
    if (given_back_) return true;
    given_back_ = true;
    return prlimit(pid_, RLIMIT_NOFILE, &normal_, nullptr) == 0;
  }

 private:
  pid_t pid_;
  rlimit normal_{};
  bool given_back_ = false;
};

}  // namespace rig::test
