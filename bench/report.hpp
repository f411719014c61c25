// The PNG report drawn from a results file: latency CDFs beside their baselines, throughput
// against size, small-operation rates, scale, and the run's facts and skipped scenarios.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rig::bench {

// Draws the report for `results` (as the harness writes it) into `png_path`. Throws
// std::runtime_error if the file cannot be written.
void write_report(const nlohmann::json& results, const std::string& png_path);

}  // namespace rig::bench
