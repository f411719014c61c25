#include "core/device.hpp"

#include <stdexcept>

namespace rig::detail {

DeviceCore::~DeviceCore() {
  if (driver_) driver_->stop();
}

void DeviceCore::check_usable() const {
  timeline_.check();
  if (closed()) throw std::invalid_argument(info_.name + " is closed");
}

void DeviceCore::lose(const std::string& why) {
  if (!timeline_.lose(why)) return;
  if (driver_) driver_->stop();
}

void DeviceCore::close() {
  if (closed_.exchange(true)) return;
  if (!timeline_.lost()) {
    try {
      timeline_.wait(submitted());
    } catch (const Lost&) {
      // Lost while draining: close without the rest of the work, as for a lost device.
    }
  }
  if (driver_) driver_->stop();
  std::lock_guard lock(mem_mu_);
  for (BufferCore* b : live_) {
    if (!b->borrowed()) driver_->release(b->address(), b->size());
    b->forget();
  }
  live_.clear();
  used_.store(0, std::memory_order_relaxed);
}

std::uint64_t DeviceCore::allocate(BufferCore* buffer, std::size_t bytes) {
  {
    // Reserve the budget first, then let the driver allocate without the lock: a proxy's
    // allocation is a round trip to its agent, and other buffers of the device need not wait.
    std::lock_guard lock(mem_mu_);
    check_usable();
    const std::uint64_t used = used_.load(std::memory_order_relaxed);
    if (bytes > info_.budget_bytes - used) {
      throw OutOfMemory(info_.name + ": out of memory: " + std::to_string(bytes) +
                        " bytes asked for, " + std::to_string(info_.budget_bytes - used) + " of " +
                        std::to_string(info_.budget_bytes) + " free");
    }
    used_.store(used + bytes, std::memory_order_relaxed);
  }
  std::uint64_t address = 0;
  try {
    address = driver_->allocate(bytes);
  } catch (...) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
  if (address == 0) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw OutOfMemory(info_.name + ": out of memory: the device could not allocate " +
                      std::to_string(bytes) + " bytes");
  }
  std::lock_guard lock(mem_mu_);
  if (closed()) {
    // Closed while the driver allocated: the memory goes back at once.
    driver_->release(address, bytes);
    throw std::invalid_argument(info_.name + " is closed");
  }
  live_.insert(buffer);
  return address;
}

void DeviceCore::release(BufferCore* buffer, std::uint64_t address, std::size_t bytes) noexcept {
  std::lock_guard lock(mem_mu_);
  if (live_.erase(buffer) == 0) return;  // already freed by close
  if (!buffer->borrowed()) {
    driver_->release(address, bytes);
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

BufferCore::BufferCore(std::shared_ptr<DeviceCore> device, std::size_t bytes)
    : device_(std::move(device)), bytes_(bytes), borrowed_(false) {
  address_ = device_.core()->allocate(this, bytes);
}

BufferCore::BufferCore(std::shared_ptr<DeviceCore> host, std::byte* data, std::size_t bytes)
    : device_(std::move(host)), bytes_(bytes), borrowed_(true) {
  address_ = reinterpret_cast<std::uint64_t>(data);
}

BufferCore::~BufferCore() {
  if (!borrowed_) device_.core()->release(this, address_, bytes_);
}

std::byte* BufferCore::data() const {
  check_usable();
  return device_.core()->driver().host_pointer(address_);
}

void BufferCore::check_usable() const {
  if (freed()) {
    throw std::invalid_argument("a buffer of " + device_.name() +
                                " was used after its device was closed");
  }
}

}  // namespace rig::detail
