// The block pool behind submissions (src/core/pool.*): blocks reused, sizes beyond the pool and an
// exhausted size served by operator new, and no block ever given to two holders at once.
#include "core/pool.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

using rig::detail::pool_allocate;
using rig::detail::pool_release;
using rig::detail::pool_stats;

TEST_CASE("a block given back is the next one taken, and counts as used only while held") {
  const auto before = pool_stats();
  void* a = pool_allocate(40);
  CHECK(pool_stats().blocks_used == before.blocks_used + 1);
  std::memset(a, 0x5A, 40);
  pool_release(a, 40);
  CHECK(pool_stats().blocks_used == before.blocks_used);
  void* b = pool_allocate(64);  // the same size class
  CHECK(b == a);
  pool_release(b, 64);
  CHECK(pool_stats().fallbacks == before.fallbacks);
}

TEST_CASE(
    "a size over the largest block, or a size whose blocks are all taken, uses operator new") {
  const auto before = pool_stats();
  void* big = pool_allocate(100 * 1024);
  CHECK(pool_stats().fallbacks == before.fallbacks + 1);
  std::memset(big, 1, 100 * 1024);
  pool_release(big, 100 * 1024);

  // Take 16 KiB blocks until the class runs out (it holds 128); the next comes from operator new.
  std::vector<void*> held;
  while (pool_stats().fallbacks == before.fallbacks + 1) {
    REQUIRE(held.size() <= 128);
    held.push_back(pool_allocate(10'000));
  }
  CHECK(std::set<void*>(held.begin(), held.end()).size() == held.size());
  for (void* p : held) pool_release(p, 10'000);
  CHECK(pool_stats().blocks_used == before.blocks_used);
}

TEST_CASE("pool vectors grow through every size and past the pool, keeping their elements") {
  rig::detail::PoolVector<std::uint64_t> v;
  for (std::uint64_t i = 0; i < 100'000; ++i) v.push_back(i * 3);
  for (std::uint64_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == i * 3);
  rig::detail::PoolString s(5000, 'x');
  s += "tail";
  CHECK(s.size() == 5004);
  CHECK(s.substr(5000) == "tail");
}

TEST_CASE("four threads taking and giving back at once never share a block") {
  constexpr int threads = 4;
  constexpr int rounds = 20'000;
  std::vector<std::thread> workers;
  std::atomic<int> bad{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, &bad] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<std::uint8_t*, std::size_t>> mine;
      for (int i = 0; i < rounds; ++i) {
        const std::size_t bytes = std::size_t{1} << (3 + rng() % 14);  // 8 B to 64 KiB
        auto* p = static_cast<std::uint8_t*>(pool_allocate(bytes));
        std::memset(p, t + 1, bytes);
        mine.emplace_back(p, bytes);
        if (mine.size() > 8 || rng() % 2 == 0) {
          const auto [q, n] = mine[rng() % mine.size()];
          for (std::size_t k = 0; k < n; k += 61) {
            if (q[k] != t + 1) ++bad;
          }
          pool_release(q, n);
          std::erase_if(mine, [q = q](const auto& e) { return e.first == q; });
        }
      }
      for (const auto& [q, n] : mine) pool_release(q, n);
    });
  }
  for (auto& w : workers) w.join();
  CHECK(bad.load() == 0);
}
