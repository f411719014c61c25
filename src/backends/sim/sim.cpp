#include "backends/sim/sim.hpp"

#include <chrono>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <thread>

#include "backends/host/host.hpp"
#include "backends/worker.hpp"
#include "program/host_module.hpp"

namespace rig::backends {
namespace {

constexpr std::size_t sim_alignment_bytes = 256;  // as a GPU allocator would give

// Draws each operation's latency; used only on the device's worker thread.
class Latency {
 public:
  explicit Latency(const sim::Options& o)
      : rng_(o.seed), dist_(o.latency_min_ns, o.latency_max_ns) {}
  void operator()() {
    const std::uint64_t ns = dist_(rng_);
    if (ns != 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<std::uint64_t> dist_;
};

// Owner: its DeviceCore. Threads: any; the worker runs the work. Lifetime: the device's.
class SimDriver final : public detail::Driver {
 public:
  SimDriver(detail::DeviceCore& device, const sim::Options& o)
      : worker_(device, o.latency_max_ns == 0 ? Worker::PartHook{} : Worker::PartHook{Latency(o)}),
        direct_(o.latency_max_ns == 0) {}

  std::uint64_t allocate(std::size_t bytes) override {
    const std::size_t rounded =
        (bytes + sim_alignment_bytes - 1) / sim_alignment_bytes * sim_alignment_bytes;
    return reinterpret_cast<std::uint64_t>(
        std::aligned_alloc(sim_alignment_bytes, rounded == 0 ? sim_alignment_bytes : rounded));
  }
  void release(std::uint64_t address, std::size_t) noexcept override {
    std::free(reinterpret_cast<void*>(address));
  }
  std::byte* host_pointer(std::uint64_t address) const noexcept override {
    return reinterpret_cast<std::byte*>(address);
  }
  // Its memory is the process's own; with a latency to simulate, each copy takes its time instead.
  bool direct_access() const noexcept override { return direct_; }
  // A SIM device reaches this process's host memory (as a GPU reaches pinned memory) and every
  // other SIM device of the process (as peers do).
  bool reaches(const detail::DeviceCore& other) const override {
    return is_local_host(other) || is_sim(other);
  }
  void enqueue(detail::Work work) override { worker_.push(std::move(work)); }
  Result<std::unique_ptr<detail::Module>> load(const Program& program) override {
    return program::load_host(program);  // a SIM device runs host code
  }
  void stop() noexcept override { worker_.stop(); }
  bool settle(std::chrono::steady_clock::time_point until) noexcept override {
    return worker_.settle(until);
  }

 private:
  Worker worker_;
  bool direct_;
};

}  // namespace

std::shared_ptr<detail::DeviceCore> make_sim_device(std::string name, const sim::Options& o) {
  if (o.latency_min_ns > o.latency_max_ns) {
    throw std::invalid_argument("rig: SIM latency_min_ns " + std::to_string(o.latency_min_ns) +
                                " is above latency_max_ns " + std::to_string(o.latency_max_ns));
  }
  auto d = std::make_shared<detail::DeviceCore>(
      detail::DeviceInfo{Kind::sim, std::move(name), "sim", o.budget_bytes});
  d->attach(std::make_unique<SimDriver>(*d, o));
  return d;
}

bool is_sim(const detail::DeviceCore& d) noexcept {
  return dynamic_cast<const SimDriver*>(&d.driver()) != nullptr;
}

}  // namespace rig::backends
