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

void futex_wake(std::atomic<std::uint32_t>* word, int waiters) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, waiters, nullptr,
          nullptr, 0);
}

}  // namespace

// A publish and a slotted sleeper decide on two different words: the sleeper announces its value
// and then reads the timeline's word, the publisher stores the word and then reads the values.
// Every one of those accesses is sequentially consistent, so in their one total order either the
// publisher sees the value or the sleeper sees the word: no sleeper misses the publish that
// reaches it. (No fences: GCC's ThreadSanitizer does not take them.) A sleeper then waits on its
// slot's futex word with the sequence it read before looking, so a wake-up in between is never
// lost either.

void Timeline::publish(std::uint64_t value) noexcept {
  std::uint64_t cur = word_.load(std::memory_order_relaxed);
  while (cur < value && !word_.compare_exchange_weak(cur, value, std::memory_order_seq_cst,
                                                     std::memory_order_relaxed)) {
  }
  if (slotted_.load(std::memory_order_seq_cst) != 0) {
    wake_slots(word_.load(std::memory_order_seq_cst));
  }
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake(&seq_, INT_MAX);
}

void Timeline::wake_slots(std::uint64_t reached) const noexcept {
  // A slot is marked woken as it is woken, so that the publishes that follow before its sleeper
  // runs make no futex call for it; a sleeper that finds its value unreached marks itself again.
  const auto due = [reached](std::uint64_t want) {
    return want != 0 && want != woken && want <= reached;
  };
  for (Slot& s : slots_) {
    std::uint64_t want = s.want.load(std::memory_order_seq_cst);
    while (due(want)) {
      if (s.want.compare_exchange_weak(want, woken, std::memory_order_seq_cst)) {
        s.seq.fetch_add(1, std::memory_order_seq_cst);
        futex_wake(&s.seq, 1);
        break;
      }
    }
  }
}

void Timeline::wake_all() noexcept {
  // Every slot's futex word moves, taken or not, after the cause was recorded: a sleeper that read
  // its sequence before the bump finds it moved (or is woken), one that read it after sees the
  // cause, which the bump's release carries. So the loss needs no order against the slots' values.
  for (Slot& s : slots_) {
    s.seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&s.seq, INT_MAX);
  }
  seq_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&seq_, INT_MAX);
}

void Timeline::wait(std::uint64_t value) const {
  if (reached() >= value && !lost()) return;
  if (spin_for(wait_spin_ns, [&] {
        check();
        return reached() >= value;
      })) {
    return;
  }
  // 0 and `woken` mean something else in a slot; no device reaches either as a value to wait for.
  if (value == 0 || value == woken) {
    sleep_shared(value);
    return;
  }
  slotted_.fetch_add(1, std::memory_order_seq_cst);
  for (Slot& s : slots_) {
    std::uint64_t free = 0;
    if (s.want.compare_exchange_strong(free, value, std::memory_order_seq_cst)) {
      sleep_in(s, value);
      return;
    }
  }
  slotted_.fetch_sub(1, std::memory_order_seq_cst);
  sleep_shared(value);
}

void Timeline::sleep_in(Slot& slot, std::uint64_t value) const {
  for (;;) {
    const std::uint32_t seq = slot.seq.load(std::memory_order_seq_cst);
    if (lost() || word_.load(std::memory_order_seq_cst) >= value) break;
    futex_wait(&slot.seq, seq);
    slot.want.store(value, std::memory_order_seq_cst);  // woken early (or marked woken): again
  }
  slot.want.store(0, std::memory_order_seq_cst);  // the slot is free again
  slotted_.fetch_sub(1, std::memory_order_seq_cst);
  check();
}

void Timeline::sleep_shared(std::uint64_t value) const {
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
  // A shared cause read already is the one this timeline keeps: a later loss does not change what
  // a reader was told. (Only a loss that races the shared cause's setting may still record its
  // own, as it would have by coming first.)
  const auto shared = shared_ ? shared_->get() : std::nullopt;
  if (!why_.set(shared ? *shared : why)) return false;
  wake_all();
  return true;
}

std::string Timeline::why() const {
  if (auto own = why_.get()) return *own;
  if (shared_) return shared_->get().value_or(std::string());
  return {};
}

void Timeline::check() const {
  if (lost()) throw Lost(why());
}

}  // namespace rig::detail
