// A controller in a process of its own, for tests that need one to kill, or two at once.
//   rig-test-controller KEY_FILE [--hold-ms N] HOST:PORT...
// Prints "started" once the job starts, waits N ms, closes and prints "closed"; or prints
// "error: WHY" (a failed start, or what connect raised) and exits 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "rig/remote.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: rig-test-controller KEY_FILE [--hold-ms N] HOST:PORT...\n");
    return 2;
  }
  auto key = rig::remote::read_key(argv[1]);
  if (!key) {
    std::printf("error: %s\n", key.error().c_str());
    return 1;
  }
  int hold_ms = 0;
  std::vector<rig::remote::Address> agents;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hold-ms" && i + 1 < argc) {
      hold_ms = std::atoi(argv[++i]);
      continue;
    }
    auto at = rig::remote::parse_address(a);
    if (!at) {
      std::fprintf(stderr, "rig-test-controller: '%s' is not HOST:PORT: %s\n", a.c_str(),
                   at.error().c_str());
      return 2;
    }
    agents.emplace_back(at->host, at->port);
  }
  // Misuse and a bad RIG_* tunable raise from connect: printed like a failed start.
  std::optional<rig::Result<rig::remote::Job>> started;
  try {
    started.emplace(rig::remote::connect(*key, agents));
  } catch (const std::invalid_argument& e) {
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);  // now, not after the exit handlers have run
    return 1;
  }
  auto& job = *started;
  if (!job) {
    std::printf("error: %s\n", job.error().c_str());
    return 1;
  }
  std::printf("started\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  if (auto f = job->failed()) {
    std::printf("failed: %s\n", f->c_str());
    return 1;
  }
  job->close();
  std::printf("closed\n");
  return 0;
}
