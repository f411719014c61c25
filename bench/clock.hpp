// The benchmark's clock, and what reading it costs.
#pragma once

#include <chrono>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace rig::bench {

// Every timestamp of the harness: steady_clock (CLOCK_MONOTONIC through the vDSO on Linux).
inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

inline double us_between(std::uint64_t t0, std::uint64_t t1) {
  return static_cast<double>(t1 - t0) / 1000.0;
}

// Back-to-back reads of steady_clock and (on x86-64) of the TSC: the smallest interval a sample
// can show and what each sample's two reads add to it. Stated in the results so that a reader can
// subtract it; the harness itself subtracts nothing.
nlohmann::json measure_clock_overhead();

}  // namespace rig::bench
