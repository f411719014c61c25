// A controller of a job that `rig run` starts (docs/remote.md walks through it): it takes the job
// its launcher set up, and on each machine makes round trips to the host, opens the SIM devices,
// loads saxpy on each, copies the inputs there, runs, copies the result back and checks every
// element; then it closes the job in order.
//
//   rig run --local 2 -- rig-example-remote SAXPY.rig
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rig run --local 2 -- %s SAXPY.rig\n", argv[0]);
    return 2;
  }
  auto program = rig::Program::read(argv[1]);
  if (!program) {
    std::fprintf(stderr, "rig-example-remote: %s\n", program.error().c_str());
    return 1;
  }
  auto job = rig::remote::launched();
  if (!job) {
    std::fprintf(stderr, "rig-example-remote: run me through a launcher: rig run --local 2 -- %s\n",
                 "rig-example-remote SAXPY.rig");
    return 2;
  }
  if (!*job) {
    std::fprintf(stderr, "rig-example-remote: the job did not start: %s\n", job->error().c_str());
    return 1;
  }

  constexpr std::size_t n = 1 << 20;
  constexpr float a = 2.5f;
  std::vector<float> x(n), y(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = 1.0f;
  }
  // This process's memory as host buffers, without a copy: a copy from one of them to a device of
  // another machine carries its bytes in the submission's message.
  const rig::Buffer host_x = rig::Buffer::borrow(x.data(), n * sizeof(float));
  const rig::Buffer host_y = rig::Buffer::borrow(y.data(), n * sizeof(float));
  const rig::Buffer host_out = rig::Buffer::borrow(out.data(), n * sizeof(float));

  const std::size_t machines = (*job)->hosts().size();
  int devices_run = 0;
  int failures = 0;
  try {
    for (const rig::Device& host : (*job)->hosts()) {
      // An empty submission reaches the host once the agent has applied everything before it: one
      // network round trip.
      constexpr int rounds = 1000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < rounds; ++i) host.wait(rig::submit(host, std::span<const rig::Part>{}));
      std::printf("%-24s arch %-10s memory %6llu MiB  round trip %7.1f us (mean of %d)\n",
                  host.name().c_str(), host.arch().c_str(),
                  static_cast<unsigned long long>(host.budget() >> 20),
                  ms_since(t0) * 1000 / rounds, rounds);

      // The machine's SIM devices as proxies: devices of this process whose memory and work are
      // the agent's.
      auto sims = rig::remote::devices(host, "SIM");
      if (!sims) {
        std::fprintf(stderr, "rig-example-remote: %s\n", sims.error().c_str());
        ++failures;
        continue;
      }
      for (const rig::Device& d : *sims) {
        // The program's bytes go to the agent, whose rig loads them on its device.
        auto image = rig::load(d, *program);
        if (!image) {
          std::fprintf(stderr, "rig-example-remote: %s\n", image.error().c_str());
          ++failures;
          continue;
        }
        std::fill(out.begin(), out.end(), 0.0f);
        const auto t1 = std::chrono::steady_clock::now();
        // As on local devices, the copies and the run are ordered by the memory they use: the run
        // follows both inputs and the copy back follows the run, with one wait at the end. The
        // agent applies the three messages in order, and the result's bytes arrive before the
        // value that the wait returns on.
        const rig::Buffer dx = rig::Buffer::make(d, n * sizeof(float));
        const rig::Buffer dy = rig::Buffer::make(d, n * sizeof(float));
        rig::copy(dx, host_x);
        rig::copy(dy, host_y);
        rig::submit(d, rig::Run{*image,
                                "saxpy",
                                rig::Shape::linear(1),
                                {rig::Arg::word(n), rig::Arg::f32(a), rig::Arg::in(dx),
                                 rig::Arg::inout(dy)}});
        rig::copy(host_out, dy).wait();
        const double ms = ms_since(t1);

        // The packed code may fuse the multiply and add (the x86-64-v3 level has FMA), so each
        // element must equal one of the two correctly rounded results.
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float plain = a * x[i] + y[i];
          wrong += out[i] != plain && out[i] != std::fma(a, x[i], y[i]);
        }
        std::printf(
            "%-24s arch %-10s budget %6llu MiB  saxpy over %zu floats in %6.1f ms, %zu wrong\n",
            d.name().c_str(), d.arch().c_str(), static_cast<unsigned long long>(d.budget() >> 20),
            n, ms, wrong);
        ++devices_run;
        failures += wrong != 0;
      }
    }
  } catch (const rig::Lost& e) {
    // The job failed: every host and proxy of it is lost with the root cause.
    std::fprintf(stderr, "rig-example-remote: the job failed: %s\n", e.what());
    (*job)->close();
    return 1;
  }
  (*job)->close();
  if (failures != 0 || devices_run == 0) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("every element checked on %d SIM devices of %zu machines; closed the job\n",
              devices_run, machines);
  return 0;
}
