// The agent's staging cache (src/remote/agent_work.*): host memory that bulk copies pass through
// is kept for the next copies of a similar size, and only then.
#include <doctest/doctest.h>

#include "remote/agent/agent_work.hpp"

using rig::remote::StagingCache;

TEST_CASE("a staging buffer given back serves the next copy of up to its size, down to half") {
  StagingCache cache;
  rig::Buffer a = cache.take(1000);
  CHECK(a.size() == 1000);
  std::byte* const at = a.access().data();
  cache.give_back(std::move(a));

  rig::Buffer small = cache.take(400);  // 1000 is over twice 400: a new buffer
  CHECK(small.access().data() != at);
  CHECK(small.size() == 400);
  rig::Buffer again = cache.take(600);
  CHECK(again.access().data() == at);
  CHECK(again.size() == 1000);
  rig::Buffer bigger = cache.take(1001);  // nothing kept is large enough
  CHECK(bigger.size() == 1001);

  cache.give_back(std::move(again));
  cache.clear();
  CHECK(cache.take(1000).access().data() != nullptr);
}

TEST_CASE("a buffer given back makes room for itself up to the cache's limit, smaller ones going") {
  StagingCache cache;
  constexpr std::size_t big = rig::remote::staging_cache_bytes_max / 2 + 1;  // two do not fit
  rig::Buffer a = cache.take(big), b = cache.take(big), small = cache.take(4096);
  std::byte* const at_b = b.access().data();
  cache.give_back(std::move(small));
  cache.give_back(std::move(a));
  CHECK(cache.kept_bytes() == big + 4096);
  cache.give_back(std::move(b));  // a and the small one go to make room
  CHECK(cache.kept_bytes() == big);
  CHECK(cache.take(big).access().data() == at_b);
  CHECK(cache.kept_bytes() == 0);
}

TEST_CASE("a large copy back from a device is staged in growing pieces, each sent once copied") {
  using rig::remote::back_piece_bytes_first;
  using rig::remote::back_pieces;
  using rig::remote::staging_piece_bytes_early;
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  CHECK(back_pieces(0).empty());
  // Below two first pieces a copy is staged whole, as before.
  CHECK(back_pieces(1) == std::vector<std::size_t>{1});
  CHECK(back_pieces(2 * back_piece_bytes_first - 1) ==
        std::vector<std::size_t>{2 * back_piece_bytes_first - 1});
  // 1 MiB: its first quarter leaves while the GPU copies the rest (staged whole, it waited for
  // all).
  CHECK(back_pieces(1 * MiB) == std::vector<std::size_t>{256 * KiB, 512 * KiB, 256 * KiB});
  CHECK(back_pieces(16 * MiB + 5) == std::vector<std::size_t>{256 * KiB, 512 * KiB, 1 * MiB,
                                                              2 * MiB, 4 * MiB, 4 * MiB, 4 * MiB,
                                                              256 * KiB + 5});
  std::size_t sum = 0, count = 0;
  for (const std::size_t p : back_pieces(1024 * MiB)) {
    CHECK(p <= staging_piece_bytes_early);
    sum += p;
    ++count;
  }
  CHECK(sum == 1024 * MiB);
  CHECK(count <= 1024 * MiB / staging_piece_bytes_early + 5);  // each costs the loop an issue
}
