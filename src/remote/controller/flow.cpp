#include "remote/controller/flow.hpp"

#include "core/signals.hpp"
#include "remote/limits.hpp"

namespace rig::remote {

std::uint64_t inflight_cost(const rig::detail::Work& work) noexcept {
  std::uint64_t bytes = part_overhead_bytes;
  for (const auto& part : work.parts) {
    bytes += part_overhead_bytes;
    if (const auto* c = std::get_if<rig::detail::CopyWork>(&part)) bytes += c->bytes;
  }
  return bytes;
}

void DeviceFlow::wait_for_room() const {
  for (;;) {
    const std::uint32_t seen = progress_.load(std::memory_order_acquire);
    if (inflight_bytes_.load(std::memory_order_acquire) <= inflight_bytes_max) return;
    if (stopped()) return;
    const rig::detail::SignalsOpen waiting;
    progress_.wait(seen, std::memory_order_acquire);
  }
}

void DeviceFlow::take(std::uint64_t bytes) noexcept {
  inflight_bytes_.fetch_add(bytes, std::memory_order_acq_rel);
}

void DeviceFlow::give_back(std::uint64_t bytes) noexcept {
  inflight_bytes_.fetch_sub(bytes, std::memory_order_acq_rel);
  progress_.fetch_add(1, std::memory_order_release);
  progress_.notify_all();
}

void DeviceFlow::stop() noexcept {
  stopped_.store(true, std::memory_order_release);
  progress_.fetch_add(1, std::memory_order_release);
  progress_.notify_all();
}

void SendFlow::set_sending(std::size_t member, bool sending) noexcept {
  sending_[member].store(sending, std::memory_order_release);
  if (!sending) wake_all();
}

void SendFlow::wake_all() noexcept {
  progress_.fetch_add(1, std::memory_order_release);
  progress_.notify_all();
}

void SendFlow::wait_while_sending(std::size_t member, const DeviceFlow& device) const {
  if (members_ <= member) return;
  for (;;) {
    const std::uint32_t seen = progress_.load(std::memory_order_acquire);
    if (!sending_[member].load(std::memory_order_acquire)) return;
    if (device.stopped()) return;
    const rig::detail::SignalsOpen waiting;
    progress_.wait(seen, std::memory_order_acquire);
  }
}

}  // namespace rig::remote
