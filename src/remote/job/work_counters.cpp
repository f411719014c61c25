#include "remote/job/work_counters.hpp"

namespace rig::remote {

namespace {
std::atomic<WorkCounters*> counters{nullptr};
}  // namespace

void set_work_counters(WorkCounters* c) noexcept {
  counters.store(c, std::memory_order_release);
}

WorkCounters* work_counters() noexcept {
  return counters.load(std::memory_order_acquire);
}

void WorkCounters::add(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept {
  if (WorkCounters* c = work_counters()) (c->*field).fetch_add(n, std::memory_order_relaxed);
}

void WorkCounters::take(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept {
  if (WorkCounters* c = work_counters()) (c->*field).fetch_sub(n, std::memory_order_relaxed);
}

}  // namespace rig::remote
