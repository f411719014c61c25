// The agent's staging cache (src/remote/agent_work.*): host memory that bulk copies pass through
// is kept for the next copies of a similar size, and only then.
#include <doctest/doctest.h>

#include "remote/agent_work.hpp"

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
