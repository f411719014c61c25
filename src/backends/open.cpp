// Opening devices: the one place that knows every backend.
#include <cstdlib>
#include <mutex>
#include <string>

#include "backends/cuda/cuda.hpp"
#include "backends/host/host.hpp"
#include "backends/sim/sim.hpp"
#include "core/limits.hpp"
#include "core/registry.hpp"
#include "rig/cuda.hpp"
#include "rig/sim.hpp"

namespace rig {
namespace {

// The devices open(kind) hands out, so that later calls return the same ones. Owner: the process
// (never destroyed). Threads: any, under mu.
struct Opened {
  std::mutex mu;
  std::vector<Device> sims;
  unsigned next_sim_index = 0;
  std::vector<Device> gpus;  // the CUDA devices, until they are closed
};

Opened& opened() {
  static Opened* const o = new Opened();
  return *o;
}

unsigned sim_device_count() {
  const char* env = std::getenv("RIG_SIM_DEVICES");
  if (env == nullptr || *env == '\0') return detail::sim_devices_default;
  char* end = nullptr;
  const unsigned long n = std::strtoul(env, &end, 10);
  if (*end != '\0' || n > detail::sim_devices_max) {
    throw std::invalid_argument("rig: RIG_SIM_DEVICES='" + std::string(env) +
                                "' is not a count from 0 to " +
                                std::to_string(detail::sim_devices_max));
  }
  return static_cast<unsigned>(n);
}

// The options rig::open(Kind::sim) gives its devices: the defaults, but for RIG_SIM_LATENCY_US
// ("MIN-MAX", microseconds per copy or run, drawn at random per operation) and RIG_SIM_SEED, so
// that an agent's SIM devices can be made slow and irregular for tests of ordering across machines.
sim::Options sim_default_options(unsigned index) {
  sim::Options o;
  if (const char* env = std::getenv("RIG_SIM_LATENCY_US"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const unsigned long long lo = std::strtoull(env, &end, 10);
    unsigned long long hi = lo;
    if (*end == '-') hi = std::strtoull(end + 1, &end, 10);
    if (*end != '\0' || hi < lo || hi > 10'000'000) {
      throw std::invalid_argument("rig: RIG_SIM_LATENCY_US='" + std::string(env) +
                                  "' is not MIN-MAX microseconds, at most 10 s");
    }
    o.latency_min_ns = lo * 1000;
    o.latency_max_ns = hi * 1000;
  }
  if (const char* env = std::getenv("RIG_SIM_SEED"); env != nullptr && *env != '\0') {
    o.seed = std::strtoull(env, nullptr, 10);
  }
  o.seed = o.seed * 1000003 + index;  // each device draws its own sequence
  return o;
}

Device open_sim_locked(Opened& o, const sim::Options& options) {
  auto core = backends::make_sim_device("SIM:" + std::to_string(o.next_sim_index), options);
  ++o.next_sim_index;
  detail::Registry::get().add(core);
  return Device(core);
}

}  // namespace

Device host() {
  // Never destroyed: exit handlers (a job's close at exit) and threads still running at exit use
  // the host after static destructors would have run.
  static const Device* const h = new Device([] {
    auto core = backends::make_host_device();
    try {
      detail::Registry::get().add(core);
    } catch (const Lost&) {
      // The process failed before its first use of the host: the host is lost with it.
    }
    return Device(core);
  }());
  return *h;
}

std::vector<Device> open(Kind kind) {
  detail::Registry::get().check_not_failed();
  switch (kind) {
    case Kind::cpu:
      return {host()};
    case Kind::cuda: {
      auto gpus = cuda::open();
      return gpus ? *gpus : std::vector<Device>{};  // rig::cuda::open says why there are none
    }
    case Kind::sim: {
      Opened& o = opened();
      std::lock_guard lock(o.mu);
      std::erase_if(o.sims, [](const Device& d) { return d.core()->closed(); });
      if (o.sims.empty()) {
        const unsigned n = sim_device_count();
        for (unsigned i = 0; i < n; ++i) {
          o.sims.push_back(open_sim_locked(o, sim_default_options(i)));
        }
      }
      return o.sims;
    }
  }
  throw std::invalid_argument("rig: open of an unknown device kind");
}

Result<std::vector<Device>> cuda::open() {
  detail::Registry::get().check_not_failed();
  Opened& o = opened();
  std::lock_guard lock(o.mu);
  std::erase_if(o.gpus, [](const Device& d) { return d.core()->closed(); });
  if (!o.gpus.empty()) return o.gpus;
  auto made = backends::make_cuda_devices();
  if (!made) return Error(made.error());
  for (auto& core : *made) {
    detail::Registry::get().add(core);
    o.gpus.emplace_back(core);
  }
  return o.gpus;
}

Device sim::open(const sim::Options& options) {
  detail::Registry::get().check_not_failed();
  Opened& o = opened();
  std::lock_guard lock(o.mu);
  return open_sim_locked(o, options);
}

}  // namespace rig
