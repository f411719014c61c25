#include "core/pool.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RIG_POOL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define RIG_POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define RIG_POOL_POISON(p, n) ((void)(p), (void)(n))
#define RIG_POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace rig::detail {
namespace {

std::atomic<std::uint64_t> fallbacks{0};

// `Count` blocks of `Block` bytes in static storage, so that the pool exists before any code runs
// and costs only the pages that blocks have touched. Blocks never taken are handed out in order
// (`fresh_`); given back, they go on the free stack and are reused first, which keeps the touched
// set small. Threads: any, and signal handlers.
template <std::size_t Block, std::uint32_t Count>
class SizeClass {
 public:
  static constexpr std::size_t block_bytes = Block;

  void* take(std::size_t bytes) noexcept {
    std::byte* block = nullptr;
    if (const std::uint32_t index = free_.pop(links_)) {
      block = slab_ + std::size_t{index - 1} * Block;
    } else {
      std::uint32_t next = fresh_.load(std::memory_order_relaxed);
      while (next < Count) {
        if (fresh_.compare_exchange_weak(next, next + 1, std::memory_order_relaxed)) {
          block = slab_ + std::size_t{next} * Block;
          break;
        }
      }
    }
    if (block == nullptr) return nullptr;
    RIG_POOL_UNPOISON(block, bytes);
    return block;
  }

  bool owns(const void* p) const noexcept {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= slab_ && b < slab_ + sizeof(slab_);
  }

  void give_back(void* p) noexcept {
    RIG_POOL_POISON(p, Block);
    const auto index = static_cast<std::uint32_t>((static_cast<std::byte*>(p) - slab_) / Block);
    free_.push(links_, index + 1);
  }

  // Blocks handed out and not given back: those ever handed out, less the free stack's length.
  // No count is kept as blocks come and go, as that was a second atomic read-modify-write on every
  // take and give-back of the submit path; exact while no other thread uses the class.
  std::uint64_t used() const noexcept {
    std::uint64_t free = 0;
    for (std::uint32_t i = free_.top(); i != 0 && free < Count;
         i = links_[i - 1].load(std::memory_order_relaxed)) {
      ++free;
    }
    return fresh_.load(std::memory_order_relaxed) - free;
  }

 private:
  alignas(64) std::byte slab_[Block * Count];
  std::atomic<std::uint32_t> links_[Count];
  IndexStack free_;
  std::atomic<std::uint32_t> fresh_{0};
};

// Sizes by a factor of four: a submission of a few parts fits the small classes; a vector that
// grows past 64 KiB (thousands of parts) is rare enough for operator new. About 8.5 MiB of address
// space in all, resident only where used.
SizeClass<64, 8192> blocks_64;
SizeClass<256, 4096> blocks_256;
SizeClass<1024, 1024> blocks_1k;
SizeClass<4096, 512> blocks_4k;
SizeClass<16384, 128> blocks_16k;
SizeClass<65536, 32> blocks_64k;

// Calls `f` with the class that serves `bytes`; returns `none` when no class does.
template <typename F, typename R>
R with_class(std::size_t bytes, F&& f, R none) {
  if (bytes <= blocks_64.block_bytes) return f(blocks_64);
  if (bytes <= blocks_256.block_bytes) return f(blocks_256);
  if (bytes <= blocks_1k.block_bytes) return f(blocks_1k);
  if (bytes <= blocks_4k.block_bytes) return f(blocks_4k);
  if (bytes <= blocks_16k.block_bytes) return f(blocks_16k);
  if (bytes <= blocks_64k.block_bytes) return f(blocks_64k);
  return none;
}

}  // namespace

void* pool_allocate(std::size_t bytes) {
  void* p = with_class(
      bytes, [bytes](auto& c) -> void* { return c.take(bytes); }, static_cast<void*>(nullptr));
  if (p != nullptr) return p;
  fallbacks.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(bytes);
}

void pool_release(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  const bool pooled = with_class(
      bytes,
      [p](auto& c) {
        if (!c.owns(p)) return false;
        c.give_back(p);
        return true;
      },
      false);
  if (!pooled) ::operator delete(p);
}

PoolStats pool_stats() noexcept {
  const std::uint64_t used = blocks_64.used() + blocks_256.used() + blocks_1k.used() +
                             blocks_4k.used() + blocks_16k.used() + blocks_64k.used();
  return {fallbacks.load(std::memory_order_relaxed), used};
}

}  // namespace rig::detail
