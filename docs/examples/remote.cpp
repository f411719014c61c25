// A controller of a job that `rig run` starts (docs/remote.md walks through it): it takes the job
// its launcher set up, makes a round trip to each machine's host, prints what it found, and
// closes the job in order.
//
//   rig run --local 2 -- rig-example-remote
#include <chrono>
#include <cstdio>

#include "rig/remote.hpp"
#include "rig/rig.hpp"

int main() {
  auto job = rig::remote::launched();
  if (!job) {
    std::fprintf(stderr, "rig-example-remote: run me through a launcher: rig run --local 2 -- %s\n",
                 "rig-example-remote");
    return 2;
  }
  if (!*job) {
    std::fprintf(stderr, "rig-example-remote: the job did not start: %s\n", job->error().c_str());
    return 1;
  }
  for (const rig::Device& host : (*job)->hosts()) {
    // An empty submission reaches the host once the agent has applied everything before it: one
    // network round trip.
    constexpr int rounds = 1000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) host.wait(rig::submit(host, std::span<const rig::Part>{}));
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        rounds;
    std::printf("%-24s arch %-10s memory %6llu MiB  round trip %7.1f us (mean of %d)\n",
                host.name().c_str(), host.arch().c_str(),
                static_cast<unsigned long long>(host.budget() >> 20), us, rounds);
  }
  (*job)->close();
  std::printf("closed the job\n");
  return 0;
}
