// Flags for the `hold` test kernel, which spins on one until it is set. A lost device's worker
// may still be spinning when a test ends, so the flags live in static storage, never freed.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>

#include "rig/rig.hpp"

namespace rig::test {

class HoldFlag {
 public:
  HoldFlag() : word_(&pool()[next().fetch_add(1)]) {
    if (word_ >= pool() + pool_size) throw std::logic_error("test: out of hold flags");
  }
  ~HoldFlag() { release(); }
  HoldFlag(const HoldFlag&) = delete;
  HoldFlag& operator=(const HoldFlag&) = delete;

  void release() { __atomic_store_n(word_, 1u, __ATOMIC_RELEASE); }
  // The flag as a host buffer, for the kernel's argument.
  Buffer buffer() const { return Buffer::borrow(word_, sizeof *word_); }

 private:
  static constexpr std::size_t pool_size = 256;
  static std::uint32_t* pool() {
    static std::uint32_t words[pool_size];
    return words;
  }
  static std::atomic<std::size_t>& next() {
    static std::atomic<std::size_t> n{0};
    return n;
  }
  std::uint32_t* word_;
};

}  // namespace rig::test
