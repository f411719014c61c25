#include "core/timeline.hpp"
#include "core/spin.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>

#include "core/limits.hpp"
#include "rig/rig.hpp"

namespace rig::detail {
namespace {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept {
  // EAGAIN (the word moved) and EINTR both just send the caller round its loop again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

void Timeline::publish(std::uint64_t value) noexcept {
  std::uint64_t cur = word_.load(std::memory_order_relaxed);
  while (cur < value && !word_.compare_exchange_weak(cur, value, std::memory_order_release,
                                                     std::memory_order_relaxed)) {
  }
  wake_all();
}

void Timeline::wake_all() noexcept {
  // The sequence bump orders after the word's store; a waiter that registered as a sleeper before
  // our load of sleepers_ either sees the new sequence in its futex call or is woken here.
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake(&seq_);
}

void Timeline::wait(std::uint64_t value) const {
  if (reached() >= value && !lost()) return;
  if (spin_for(wait_spin_ns, [&] {
        check();
        return reached() >= value;
      })) {
    return;
  }
  for (;;) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seq = seq_.load(std::memory_order_seq_cst);
    const bool done = lost() || reached() >= value;
    if (!done) futex_wait(&seq_, seq);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    check();
    if (reached() >= value) return;
  }
}

bool Timeline::lose(const std::string& why) {
  if (!why_.set(why)) return false;
  wake_all();
  return true;
}

std::string Timeline::why() const {
  return why_.get().value_or(std::string());
}

void Timeline::check() const {
  if (lost()) throw Lost(why());
}

}  // namespace rig::detail
