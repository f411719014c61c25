// Scenario 4, scale: a controller with 1, 8, 32 and 64 agents on loopback. The harness starts the
// rigd daemons (run_scale); each agent count is measured in a fresh worker process
// (scale_worker), so that the controller memory it reports is that count's alone.
#pragma once

#include <nlohmann/json.hpp>

namespace rig::bench {

struct Ctx;

// The whole-run scenario: starts the daemons, runs a worker per agent count, stops the daemons.
nlohmann::json run_scale(Ctx& ctx);

// The worker for one agent count; `args` is what run_scale passes. Prints its result as JSON on
// stdout; returns an exit status.
int scale_worker(const nlohmann::json& args);

}  // namespace rig::bench
