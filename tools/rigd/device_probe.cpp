#include "rigd/device_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "child/child.hpp"
#include "remote/wire/printable.hpp"
#include "rig/rig.hpp"

namespace rig::rigd {

namespace {

using Clock = std::chrono::steady_clock;

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the daemon went away: nothing to tell
    done += static_cast<std::size_t>(n);
  }
}

// A field of a line: printable, so without the tab and newline that frame it (those are escaped).
std::string field(std::string_view text) {
  return rig::remote::printable(text);
}

}  // namespace

int probe_devices(const std::vector<std::pair<std::string, rig::remote::Opener>>& kinds, int fd) {
  for (const auto& [name, open] : kinds) {
    std::string lines;
    try {
      auto devices = open();
      if (!devices) lines = "problem\t" + field(devices.error()) + "\n";
      for (const rig::Device& d : devices ? *devices : std::vector<rig::Device>{}) {
        lines += "device\t" + field(d.name()) + "\t" + field(d.arch()) + "\t" +
                 std::to_string(d.budget()) + "\n";
      }
    } catch (const std::exception& e) {
      lines = "problem\t" + field(name) + ": " + field(e.what()) + "\n";
    }
    write_all(fd, lines);
  }
  return 0;
}

ProbeLine parse_probe_line(std::string_view line) {
  ProbeLine out;
  auto next = [&line]() -> std::optional<std::string_view> {
    if (line.data() == nullptr) return std::nullopt;
    const std::size_t tab = line.find('\t');
    const std::string_view f = line.substr(0, tab);
    line = tab == std::string_view::npos ? std::string_view{} : line.substr(tab + 1);
    return f;
  };
  const auto what = next();
  if (what == "problem") {
    if (auto text = next(); text && !text->empty())
      out.problem = rig::remote::printable_once(*text);
    return out;
  }
  if (what != "device") return out;
  const auto name = next(), arch = next(), budget = next();
  if (!name || !arch || !budget || name->empty() || budget->empty() || next()) return out;
  std::uint64_t bytes = 0;
  for (const char c : *budget) {
    if (c < '0' || c > '9' || bytes > (UINT64_MAX - 9) / 10) return out;
    bytes = bytes * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out.device =
      DeviceFact{rig::remote::printable_once(*name), rig::remote::printable_once(*arch), bytes};
  return out;
}

DeviceProbe::DeviceProbe(const std::string& kinds, Metrics& metrics) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    metrics.devices_probed(
        {{}, {std::string("the device probe could not start: eventfd: ") + std::strerror(errno)}});
    return;
  }
  thread_ = std::thread([this, kinds, &metrics] {
    pthread_setname_np(pthread_self(), "rigd-probe");
    // Nothing may escape a thread: a failure here (out of memory) is /status's to show.
    try {
      run(kinds, metrics);
    } catch (const std::exception& e) {
      try {
        metrics.devices_probed({{}, {std::string("the device probe failed: ") + e.what()}});
      } catch (...) {
      }
    }
  });
}

DeviceProbe::~DeviceProbe() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    (void)::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void DeviceProbe::run(const std::string& kinds, Metrics& metrics) {
  std::vector<DeviceFact> devices;
  std::vector<std::string> problems;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    metrics.devices_probed(
        {{}, {std::string("the device probe could not start: pipe: ") + std::strerror(errno)}});
    return;
  }
  rig::child::Spec spec;
  spec.file = "/proc/self/exe";
  spec.argv = {"rigd", "--probe-devices", std::to_string(out[1]), "--kinds", kinds};
  spec.keep_fds = {out[1]};
  spec.unblock_signals = true;
  // This thread waits for the child; should the daemon die first, so does the probe.
  spec.parent_death_signal = SIGKILL;
  const auto pid = rig::child::spawn(spec);
  ::close(out[1]);
  if (!pid) {
    ::close(out[0]);
    metrics.devices_probed({{}, {"the device probe could not start: " + pid.error()}});
    return;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(device_probe_timeout_ms);
  std::string pending;
  bool ended = false, stopped = false, timed_out = false;
  auto take_lines = [&] {
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      ProbeLine l = parse_probe_line(std::string_view(pending).substr(0, nl));
      if (l.device) devices.push_back(std::move(*l.device));
      if (l.problem) problems.push_back(std::move(*l.problem));
      pending.erase(0, nl + 1);
    }
    // A line past the bound is dropped; what follows of it parses as no line and is dropped too.
    if (pending.size() > device_probe_line_bytes_max) pending.clear();
  };
  while (!ended) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out[0], POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(left.count())) < 0) continue;
    if (fds[1].revents != 0) {
      stopped = true;
      break;
    }
    if (fds[0].revents == 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ended = true;
    } else {
      pending.append(buf, static_cast<std::size_t>(n));
      take_lines();
    }
  }
  ::close(out[0]);
  if (!ended) kill(*pid, SIGKILL);
  const int status = rig::child::wait_exit(*pid);
  if (stopped) return;
  if (timed_out) {
    problems.push_back("the device probe gave no answer within " +
                       std::to_string(device_probe_timeout_ms / 1000) + " s");
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    problems.push_back("the device probe ended with status " +
                       std::string(WIFSIGNALED(status)
                                       ? "signal " + std::to_string(WTERMSIG(status))
                                       : std::to_string(WEXITSTATUS(status))));
  }
  metrics.devices_probed({std::move(devices), std::move(problems)});
}

}  // namespace rig::rigd
