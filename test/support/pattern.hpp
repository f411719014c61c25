// Byte patterns for the tests that check every byte of a copy or a rail's round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rig::test {

// `n` bytes that differ from one offset to the next and from one seed to the next.
inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<std::uint8_t>(x >> 24);
  }
  return v;
}

}  // namespace rig::test
