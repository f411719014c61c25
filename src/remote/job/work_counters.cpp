#include "remote/job/work_counters.hpp"

namespace rig::remote {

void WorkCounters::clear() noexcept {
  for (auto* f :
       {&devices_open, &memory_bytes, &submissions, &copies, &copy_bytes, &rail_rounds_sent,
        &rail_bytes_sent, &rail_rounds_arrived, &rail_bytes_arrived, &rail_rounds_host_read}) {
    f->store(0);
  }
  for (DeviceUse& d : devices) {
    d.name.clear();
    d.memory_bytes.store(0);
  }
  device_lost.store(0);
}

void WorkCounters::add(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept {
  if (WorkCounters* c = work_counters()) (c->*field).fetch_add(n, std::memory_order_relaxed);
}

void WorkCounters::take(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept {
  if (WorkCounters* c = work_counters()) (c->*field).fetch_sub(n, std::memory_order_relaxed);
}

WorkCounters::DeviceUse* WorkCounters::slot(std::string_view device) noexcept {
  // One writer (the loop), so a slot is found or taken without a race.
  for (DeviceUse& d : devices) {
    if (d.name.holds(device)) return &d;
    if (d.name.empty()) {
      d.name.store(device);
      return &d;
    }
  }
  return nullptr;
}

void WorkCounters::device_opened(std::string_view device) noexcept {
  if (WorkCounters* c = work_counters()) {
    c->devices_open.fetch_add(1, std::memory_order_relaxed);
    (void)c->slot(device);
  }
}

void WorkCounters::memory_made(std::string_view device, std::uint64_t bytes) noexcept {
  if (WorkCounters* c = work_counters()) {
    c->memory_bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (DeviceUse* d = c->slot(device)) d->memory_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void WorkCounters::memory_freed(std::string_view device, std::uint64_t bytes) noexcept {
  if (WorkCounters* c = work_counters()) {
    c->memory_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    if (DeviceUse* d = c->slot(device)) d->memory_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

}  // namespace rig::remote
