// Memory for the submission path. A signal handler may submit while its thread is anywhere,
// inside malloc included, so nothing a submission builds may come from malloc: the vectors and
// strings it needs take fixed blocks from static slabs instead, through lock-free free lists.
// Blocks go back from whichever thread drops the last use (a device's worker, the loop).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <vector>

namespace rig::detail {

// A lock-free stack of the indices 1..N of some fixed array, linked through `links` (index i's
// successor in links[i - 1]). The head carries a generation count beside the index, so an index
// popped and pushed again between another thread's read of the head and its compare-exchange
// cannot pass for the head it read (the ABA problem). Zero-initialized, it is empty, so it needs
// no constructor to run: usable from static storage before main and from signal handlers.
// Owner: whoever owns the array. Threads: any, and signal handlers.
class IndexStack {
 public:
  // The top index, removed; 0 when the stack is empty.
  std::uint32_t pop(std::atomic<std::uint32_t>* links) noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const auto index = static_cast<std::uint32_t>(head);
      if (index == 0) return 0;
      // A stale link (the index was popped meanwhile) only makes the exchange below fail.
      const std::uint32_t next = links[index - 1].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(next, generation(head) + 1),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        return index;
      }
    }
  }

  // The top index (0: empty), left in place.
  std::uint32_t top() const noexcept {
    return static_cast<std::uint32_t>(head_.load(std::memory_order_acquire));
  }

  void push(std::atomic<std::uint32_t>* links, std::uint32_t index) noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      links[index - 1].store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(index, generation(head) + 1),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        return;
      }
    }
  }

 private:
  static std::uint64_t pack(std::uint32_t index, std::uint32_t gen) noexcept {
    return (std::uint64_t{gen} << 32) | index;
  }
  static std::uint32_t generation(std::uint64_t head) noexcept {
    return static_cast<std::uint32_t>(head >> 32);
  }

  std::atomic<std::uint64_t> head_{0};
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
};

// `bytes` from the block pool: the smallest free block that holds them, or, when every block of
// that size is taken or `bytes` is over the largest block, from operator new (counted in
// pool_stats().fallbacks). Threads: any, and signal handlers (while blocks last).
void* pool_allocate(std::size_t bytes);
// Gives back what pool_allocate(bytes) gave, with the same `bytes`.
void pool_release(void* p, std::size_t bytes) noexcept;

struct PoolStats {
  std::uint64_t fallbacks;    // allocations that went to operator new
  std::uint64_t blocks_used;  // blocks taken and not yet given back, over every size (exact only
                              // while no other thread takes or gives back blocks)
};
PoolStats pool_stats() noexcept;

// A standard allocator over the block pool, for the containers a submission builds.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  static_assert(alignof(T) <= alignof(std::max_align_t), "pool blocks are max_align_t aligned");

  PoolAllocator() noexcept = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit by design

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(pool_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { pool_release(p, n * sizeof(T)); }

  friend bool operator==(const PoolAllocator&, const PoolAllocator&) noexcept { return true; }
};

template <typename T>
using PoolVector = std::vector<T, PoolAllocator<T>>;
using PoolString = std::basic_string<char, std::char_traits<char>, PoolAllocator<char>>;

}  // namespace rig::detail
