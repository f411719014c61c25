#include "backends/host/host.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include "backends/worker.hpp"
#include "core/arch.hpp"
#include "program/host_module.hpp"

namespace rig::backends {
namespace {

// Host allocations are cache-line aligned, which host code may rely on for vector loads.
constexpr std::size_t host_alignment_bytes = 64;

// The installed pinned allocator, and the addresses of the host allocations that came from it.
// Owner: the process (never destroyed: buffers may be released during static destruction).
// Threads: any, under mu.
struct Pinned {
  std::atomic<bool> installed{false};
  PinnedAllocator allocator{};
  std::mutex mu;
  std::unordered_set<std::uint64_t> addresses;
};

Pinned& pinned() {
  static Pinned* const p = new Pinned();
  return *p;
}

// Owner: the host DeviceCore. Threads: any; the worker runs the work. Lifetime: the process's.
class HostDriver final : public detail::Driver {
 public:
  explicit HostDriver(detail::DeviceCore& device) : worker_(device, nullptr) {}

  std::uint64_t allocate(std::size_t bytes) override {
    Pinned& pin = pinned();
    if (pin.installed.load(std::memory_order_acquire)) {
      if (void* m = pin.allocator.allocate(bytes == 0 ? 1 : bytes)) {
        const auto address = reinterpret_cast<std::uint64_t>(m);
        std::lock_guard lock(pin.mu);
        pin.addresses.insert(address);
        return address;
      }
    }
    const std::size_t rounded =
        (bytes + host_alignment_bytes - 1) / host_alignment_bytes * host_alignment_bytes;
    void* p =
        std::aligned_alloc(host_alignment_bytes, rounded == 0 ? host_alignment_bytes : rounded);
    return reinterpret_cast<std::uint64_t>(p);
  }
  void release(std::uint64_t address, std::size_t) noexcept override {
    Pinned& p = pinned();
    if (p.installed.load(std::memory_order_acquire)) {
      std::unique_lock lock(p.mu);
      if (p.addresses.erase(address) != 0) {
        lock.unlock();
        p.allocator.release(reinterpret_cast<void*>(address));
        return;
      }
    }
    std::free(reinterpret_cast<void*>(address));
  }
  std::byte* host_pointer(std::uint64_t address) const noexcept override {
    return reinterpret_cast<std::byte*>(address);
  }
  bool direct_access() const noexcept override { return true; }
  bool reaches(const detail::DeviceCore& other) const override { return is_local_host(other); }
  void enqueue(detail::Work work) override { worker_.push(std::move(work)); }
  Result<std::unique_ptr<detail::Module>> load(const Program& program) override {
    return program::load_host(program);
  }
  void stop() noexcept override { worker_.stop(); }
  bool settle(std::chrono::steady_clock::time_point until) noexcept override {
    return worker_.settle(until);
  }

 private:
  Worker worker_;
};

std::uint64_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{1} << 30;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace

std::shared_ptr<detail::DeviceCore> make_host_device() {
  auto d = std::make_shared<detail::DeviceCore>(
      detail::DeviceInfo{Kind::cpu, "CPU", detail::host_isa_level(), machine_memory_bytes()});
  d->attach(std::make_unique<HostDriver>(*d));
  return d;
}

bool is_local_host(const detail::DeviceCore& d) noexcept {
  return dynamic_cast<const HostDriver*>(&d.driver()) != nullptr;
}

void install_pinned_allocator(PinnedAllocator a) noexcept {
  Pinned& p = pinned();
  std::lock_guard lock(p.mu);
  if (p.installed.load(std::memory_order_relaxed)) return;
  p.allocator = a;
  p.installed.store(true, std::memory_order_release);
}

bool is_pinned_host_buffer(const detail::BufferCore& b) noexcept {
  if (b.borrowed() || !is_local_host(*b.device())) return false;
  Pinned& p = pinned();
  if (!p.installed.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(p.mu);
  return p.addresses.count(b.address()) != 0;
}

}  // namespace rig::backends
