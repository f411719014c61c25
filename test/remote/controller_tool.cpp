// A controller in a process of its own, for tests that need one to kill, or two at once, or that
// watch what its exit does.
//   rig-test-controller KEY_FILE [--hold-ms N] [--copy-mib N] [--until-failed] [--break-at-exit]
//                       HOST:PORT...
// Prints "started" once the job starts, waits N ms, closes and prints "closed"; or prints
// "error: WHY" (a failed start, or what connect raised) and exits 1. --copy-mib N first starts a
// copy of N MiB from this process to the last agent's host and does not wait for it.
// --until-failed waits (up to 60 s) for the job to fail instead, prints "failed: WHY", closes it
// and exits 0, so that the exit's wait for the job's connections is what ends the process.
// --break-at-exit requests a break after the hold and exits 0 without closing: the exit's close
// then ends in the break.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {
std::vector<std::uint8_t>* copy_source = nullptr;
}  // namespace

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
  int copy_mib = 0;
  bool until_failed = false;
  bool break_at_exit = false;
  std::vector<rig::remote::Address> agents;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hold-ms" && i + 1 < argc) {
      hold_ms = std::atoi(argv[++i]);
      continue;
    }
    if (a == "--copy-mib" && i + 1 < argc) {
      copy_mib = std::atoi(argv[++i]);
      continue;
    }
    if (a == "--until-failed") {
      until_failed = true;
      continue;
    }
    if (a == "--break-at-exit") {
      break_at_exit = true;
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
  // Never freed (held by a global, so leak checkers see it reachable): the copy may still be
  // sending from it while the exit waits for the job. Filled before the job starts: under TSan on
  // a loaded machine filling 256 MiB took longer than the 10 s a silent fake agent allows.
  copy_source = new std::vector<std::uint8_t>(static_cast<std::size_t>(copy_mib) << 20, 0x5A);
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
  std::vector<std::uint8_t>* const source = copy_source;
  std::optional<rig::Buffer> there;
  if (copy_mib > 0) {
    there = rig::Buffer::make(job->hosts().back(), source->size());
    (void)rig::copy(*there, 0, rig::Buffer::borrow(source->data(), source->size()), 0,
                    source->size());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  if (until_failed) {
    for (int i = 0; i < 6000 && !job->failed(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("failed: %s\n", job->failed().value_or("(none within 60 s)").c_str());
    std::fflush(stdout);
    job->close();  // returns at once: the job has failed
    return 0;
  }
  if (break_at_exit) {
    rig::remote::request_break();
    return 0;
  }
  if (auto f = job->failed()) {
    std::printf("failed: %s\n", f->c_str());
    return 1;
  }
  job->close();
  std::printf("closed\n");
  return 0;
}
