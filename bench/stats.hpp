// Sample statistics for the benchmark: order statistics, mean, and a thinned CDF for the report.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rig::bench {

// What one measurement's samples come to. Values are in the unit the samples were taken in
// (microseconds for latencies, GB/s for throughput); `count` is the samples kept and
// `warmup_excluded` the ones taken before them and left out on purpose. Nothing else is dropped.
struct Summary {
  std::size_t count = 0;
  std::size_t warmup_excluded = 0;
  double p50 = 0, p90 = 0, p99 = 0, p99_9 = 0, mean = 0, min = 0, max = 0;
  // (value, fraction of samples at or below it), thinned to at most cdf_points_max points.
  std::vector<std::pair<double, double>> cdf;
};

// The CDF kept for the report: enough points for a smooth curve, with the tail kept exactly.
inline constexpr std::size_t cdf_points_max = 240;

// Sorts `samples` (taken after the warm-up) and summarises them. An empty set gives zeros.
Summary summarize(std::vector<double> samples, std::size_t warmup_excluded);

// The statistics without the CDF, and the CDF as [[value, fraction], ...].
nlohmann::json stats_json(const Summary& s);
nlohmann::json cdf_json(const Summary& s);

}  // namespace rig::bench
