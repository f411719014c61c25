// A controller that a launcher starts, for rig run's tests.
//   rig-test-launched [--timing-divisor N] [--hold-ms N]
// Starts the job with launched() and prints "started"; holds it until it fails, or for N ms when
// --hold-ms is given; then closes it and prints "closed", or "failed: WHY" and exits 1. A start
// that fails prints "error: WHY" and exits 1. --timing-divisor scales the liveness times down as
// rigd's --test-timing-divisor does.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "remote/io/timing.hpp"
#include "remote/job/process.hpp"
#include "rig/remote.hpp"

int main(int argc, char** argv) {
  std::optional<int> hold_ms;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hold-ms") == 0 && i + 1 < argc) {
      hold_ms = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--timing-divisor") == 0 && i + 1 < argc) {
      rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: rig-test-launched [--timing-divisor N] [--hold-ms N]\n");
      return 2;
    }
  }
  auto job = rig::remote::launched();
  if (!job) {
    std::printf("error: not started by a launcher\n");
    return 1;
  }
  if (!*job) {
    std::printf("error: %s\n", job->error().c_str());
    return 1;
  }
  std::printf("started\n");
  std::fflush(stdout);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms.value_or(0));
  // The job's failure is a state to look at (failed()), not an event to wait on: look each ms.
  while (!(**job).failed() && (!hold_ms || std::chrono::steady_clock::now() < until)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (auto f = (**job).failed()) {
    std::printf("failed: %s\n", f->c_str());
    std::fflush(stdout);
    return 1;
  }
  (**job).close();
  std::printf("closed\n");
  return 0;
}
