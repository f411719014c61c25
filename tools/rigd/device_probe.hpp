// What devices this machine has, for /status: found once, when the daemon starts with --metrics,
// by a short-lived child (`rigd --probe-devices FD`) that opens every kind of --kinds and writes
// one line per device. A child, not the daemon: opening a device (a CUDA context, SIM's threads)
// in the daemon would hold memory on the GPU between jobs, and every job process is started from
// the daemon, which must stay free of device state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "rig/remote.hpp"
#include "rigd/metrics.hpp"

namespace rig::rigd {

// How long the probe may take before the daemon gives up on it (and says so in /status): opening
// the CUDA driver and every GPU of a large machine takes seconds, not minutes.
inline constexpr int device_probe_timeout_ms = 60'000;
// The longest line the probe writes that the daemon reads (a device's name and arch, or why a
// kind could not be opened); longer ones are cut.
inline constexpr std::size_t device_probe_line_bytes_max = 1024;

// The child's side: opens every kind of `kinds` (rigd's openers of --kinds, in order) and writes
// its lines to `fd`: "device\tNAME\tARCH\tBUDGET" for each device, "problem\tWHY" for a kind that
// has none or could not be opened (the opener's text: "this machine has no CUDA devices"). 0 once
// written.
int probe_devices(const std::vector<std::pair<std::string, rig::remote::Opener>>& kinds, int fd);

// One line of the probe, read by the daemon: a device, a problem, or nothing if it is neither.
struct ProbeLine {
  std::optional<DeviceFact> device;
  std::optional<std::string> problem;
};
ProbeLine parse_probe_line(std::string_view line);

// The daemon's side. Owner: main. Threads: made on main's; reads the child on a thread of its
// own, which tells `metrics` what it found (or why it found nothing) and ends. Lifetime: main's,
// within that of `metrics`; its destructor stops a probe still running (the child is killed and
// reaped) and joins the thread.
class DeviceProbe {
 public:
  DeviceProbe(const std::string& kinds, Metrics& metrics);
  ~DeviceProbe();
  DeviceProbe(const DeviceProbe&) = delete;
  DeviceProbe& operator=(const DeviceProbe&) = delete;

 private:
  void run(const std::string& kinds, Metrics& metrics);

  int stop_fd_ = -1;  // an eventfd: the destructor's word to stop
  std::thread thread_;
};

}  // namespace rig::rigd
