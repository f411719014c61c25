#include "remote/job/rail_count.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>

#include "core/limits.hpp"
#include "core/spin.hpp"
#include "remote/limits.hpp"

namespace rig::remote {
namespace {

constexpr std::size_t slots = rails_max;
constexpr std::size_t bits_per_word = 64;
constexpr std::size_t bitmap_words = (slots + bits_per_word - 1) / bits_per_word;

// The table: two words per slot, and a bitmap of the slots in use. Static, so that it exists
// before any thread may take from it and for as long as any may use it.
RailWord table[2 * slots];
std::atomic<std::uint64_t> in_use[bitmap_words];

void futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept {
  syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
          nullptr, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

void raise_in_child() noexcept {
  raise_every_rail_count();
}

}  // namespace

void RailWord::publish(std::uint64_t v) noexcept {
  std::uint64_t cur = value.load(std::memory_order_relaxed);
  while (cur < v && !value.compare_exchange_weak(cur, v, std::memory_order_release,
                                                 std::memory_order_relaxed)) {
  }
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&seq);
}

std::uint64_t RailWord::wait(std::uint64_t v) const noexcept {
  std::uint64_t now = get();
  if (now >= v) return now;
  if (rig::detail::spin_for(rig::detail::wait_spin_ns, [&] {
        now = get();
        return now >= v;
      })) {
    return now;
  }
  auto& self = const_cast<RailWord&>(*this);
  for (;;) {
    self.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t s = seq.load(std::memory_order_seq_cst);
    now = get();
    if (now < v) futex_wait(&seq, s);
    self.sleepers.fetch_sub(1, std::memory_order_relaxed);
    now = get();
    if (now >= v) return now;
  }
}

std::uint64_t RailWord::wait_moved(std::uint64_t v, std::uint32_t seen) const noexcept {
  std::uint64_t now = get();
  const auto moved = [&] {
    now = get();
    return now >= v || seq.load(std::memory_order_seq_cst) != seen;
  };
  if (moved() || rig::detail::spin_for(rig::detail::wait_spin_ns, moved)) return now;
  auto& self = const_cast<RailWord&>(*this);
  self.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (get() < v) futex_wait(&seq, seen);
  self.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return get();
}

void RailWord::nudge() noexcept {
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&seq);
}

std::optional<RailCounts> RailCounts::take() noexcept {
  static const bool child_raises = [] {
    pthread_atfork(nullptr, nullptr, raise_in_child);
    return true;
  }();
  (void)child_raises;
  for (std::size_t w = 0; w < bitmap_words; ++w) {
    std::uint64_t bits = in_use[w].load(std::memory_order_relaxed);
    while (bits != UINT64_MAX) {
      const int free_bit = __builtin_ctzll(~bits);
      const std::size_t slot = w * bits_per_word + static_cast<std::size_t>(free_bit);
      if (slot >= slots) break;
      if (in_use[w].compare_exchange_weak(bits, bits | (std::uint64_t{1} << free_bit),
                                          std::memory_order_acq_rel)) {
        for (RailWord* word : {&table[2 * slot], &table[2 * slot + 1]}) {
          word->value.store(0, std::memory_order_release);
        }
        return RailCounts(static_cast<std::uint32_t>(slot));
      }
    }
  }
  return std::nullopt;
}

RailCounts::~RailCounts() {
  if (slot_ == none) return;
  in_use[slot_ / bits_per_word].fetch_and(~(std::uint64_t{1} << (slot_ % bits_per_word)),
                                          std::memory_order_acq_rel);
}

RailWord& RailCounts::sent() const noexcept {
  return table[2 * slot_];
}
RailWord& RailCounts::arrived() const noexcept {
  return table[2 * slot_ + 1];
}

void RailCounts::arrive(std::uint64_t round) noexcept {
  sent().publish(round);
  arrived().publish(round);
}

void RailCounts::raise() noexcept {
  sent().publish(rail_count_raised);
  arrived().publish(rail_count_raised);
}

void raise_every_rail_count() noexcept {
  // In a child of fork only the forking thread exists: nobody sleeps on a word, so no wake-up.
  for (RailWord& word : table) word.value.store(rail_count_raised, std::memory_order_release);
}

}  // namespace rig::remote
