#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rig::bench {

namespace {

// Nearest-rank percentile of sorted samples: the smallest sample with at least fraction q of the
// samples at or below it. It is always a measured value, never an interpolation.
double rank(const std::vector<double>& sorted, double q) {
  const auto n = sorted.size();
  auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(n)));
  if (k < 1) k = 1;
  if (k > n) k = n;
  return sorted[k - 1];
}

}  // namespace

Summary summarize(std::vector<double> samples, std::size_t warmup_excluded) {
  Summary s;
  s.warmup_excluded = warmup_excluded;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.p50 = rank(samples, 0.50);
  s.p90 = rank(samples, 0.90);
  s.p99 = rank(samples, 0.99);
  s.p99_9 = rank(samples, 0.999);
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);

  // Evenly spaced fractions for the body, and the tail at 1 - 10^-k so that a log-tail reader
  // still sees p99.9 and the maximum.
  std::vector<double> fractions;
  const std::size_t body = cdf_points_max - 8;
  for (std::size_t i = 1; i <= body; ++i) {
    fractions.push_back(static_cast<double>(i) / static_cast<double>(body + 1));
  }
  for (double f : {0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0}) fractions.push_back(f);
  std::sort(fractions.begin(), fractions.end());
  for (double f : fractions) {
    const double v = rank(samples, f);
    if (!s.cdf.empty() && s.cdf.back().first == v) {
      s.cdf.back().second = f;
    } else {
      s.cdf.emplace_back(v, f);
    }
  }
  return s;
}

nlohmann::json stats_json(const Summary& s) {
  return {{"count", s.count}, {"warmup_excluded", s.warmup_excluded},
          {"p50", s.p50},     {"p90", s.p90},
          {"p99", s.p99},     {"p99_9", s.p99_9},
          {"mean", s.mean},   {"min", s.min},
          {"max", s.max}};
}

nlohmann::json cdf_json(const Summary& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [v, f] : s.cdf) out.push_back({v, f});
  return out;
}

}  // namespace rig::bench
