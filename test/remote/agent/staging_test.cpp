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
