#include "clock.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "stats.hpp"

namespace rig::bench {

namespace {

// Enough back-to-back pairs for stable order statistics; a few milliseconds in all.
constexpr std::size_t clock_pairs = 200'000;
// How long the TSC is compared with steady_clock to find its rate.
constexpr auto tsc_calibration = std::chrono::milliseconds(50);

}  // namespace

nlohmann::json measure_clock_overhead() {
  nlohmann::json out;
  std::vector<double> steady;
  steady.reserve(clock_pairs);
  for (std::size_t i = 0; i < clock_pairs; ++i) {
    const std::uint64_t a = now_ns();
    const std::uint64_t b = now_ns();
    steady.push_back(static_cast<double>(b - a));
  }
  const Summary s = summarize(std::move(steady), 0);
  out["steady_clock_ns"] = stats_json(s);
  out["note"] =
      "cost of two back-to-back reads, in ns; every latency sample holds one such pair and "
      "nothing is subtracted from it";
#if defined(__x86_64__)
  const std::uint64_t t0 = now_ns();
  const std::uint64_t c0 = __rdtsc();
  std::this_thread::sleep_for(tsc_calibration);
  const std::uint64_t c1 = __rdtsc();
  const std::uint64_t t1 = now_ns();
  const double ticks_per_ns = static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
  std::vector<double> tsc;
  tsc.reserve(clock_pairs);
  for (std::size_t i = 0; i < clock_pairs; ++i) {
    const std::uint64_t a = __rdtsc();
    const std::uint64_t b = __rdtsc();
    tsc.push_back(static_cast<double>(b - a) / ticks_per_ns);
  }
  out["rdtsc_ns"] = stats_json(summarize(std::move(tsc), 0));
  out["tsc_ghz"] = ticks_per_ns;
#else
  out["rdtsc_ns"] = nullptr;
  out["rdtsc_skipped"] = "not an x86-64 machine";
#endif
  return out;
}

}  // namespace rig::bench
