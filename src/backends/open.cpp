// Opening devices: the one place that knows every backend.
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
  return static_cast<unsigned>(detail::read_tunable(detail::sim_devices_tunable));
}

// The options rig::open(Kind::sim) gives its devices: the defaults, but for the latency and seed
// tunables (core/limits.hpp).
sim::Options sim_default_options(unsigned index) {
  sim::Options o;
  static_assert(sim::Options{}.latency_min_ns == detail::sim_latency_us_default * 1000 &&
                sim::Options{}.seed == detail::sim_seed_default);
  const detail::TunableRange latency_us =
      detail::read_tunable_range(detail::sim_latency_us_tunable);
  o.latency_min_ns = latency_us.low * 1000;
  o.latency_max_ns = latency_us.high * 1000;
  o.seed = detail::read_tunable(detail::sim_seed_tunable);
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
