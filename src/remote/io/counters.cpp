#include "remote/io/counters.hpp"

namespace rig::remote {

namespace {
std::atomic<ConnectionCounters*> counters{nullptr};
}  // namespace

void set_connection_counters(ConnectionCounters* c) noexcept {
  counters.store(c, std::memory_order_release);
}

ConnectionCounters* connection_counters() noexcept {
  return counters.load(std::memory_order_acquire);
}

}  // namespace rig::remote
