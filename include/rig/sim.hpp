// SIM devices: simulated accelerators for tests and for trying rig without a GPU. Each has its own
// allocations, a budget and an in-order queue on a worker thread that runs host code, with a
// per-operation latency drawn at random so that tests can provoke races.
#pragma once

#include <cstdint>

#include "rig/rig.hpp"

namespace rig::sim {

struct Options {
  std::uint64_t budget_bytes = std::uint64_t{1} << 30;
  // Each copy or run waits a latency drawn uniformly from [latency_min_ns, latency_max_ns].
  std::uint64_t latency_min_ns = 0;
  std::uint64_t latency_max_ns = 0;
  std::uint64_t seed = 1;  // for the latency draws
};

// Opens one more SIM device, named "SIM:N" for the next free N. rig::open(Kind::sim) opens
// RIG_SIM_DEVICES (default 2) devices with default options the first time it is called.
Device open(const Options& options);

}  // namespace rig::sim
