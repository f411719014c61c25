#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "remote/queue.hpp"

using rig::remote::MpscQueue;
using rig::remote::NodePool;
using rig::remote::QueueNode;

namespace {

struct Item : QueueNode {
  std::uint32_t producer = 0;
  std::uint64_t seq = 0;
};

}  // namespace

TEST_CASE("the queue hands nodes over in push order") {
  MpscQueue q;
  CHECK(q.pop() == nullptr);
  Item a, b, c;
  q.push(&a);
  q.push(&b);
  CHECK(q.pop() == &a);
  q.push(&c);
  CHECK(q.pop() == &b);
  CHECK(q.pop() == &c);
  CHECK(q.pop() == nullptr);
  q.push(&a);
  CHECK(q.pop() == &a);
  CHECK(q.pop() == nullptr);
}

TEST_CASE("the pool gives each node to one taker, and gives them all back") {
  NodePool<Item> pool(3);
  Item* a = pool.take();
  Item* b = pool.take();
  Item* c = pool.take();
  CHECK(pool.take() == nullptr);
  CHECK(std::set<Item*>{a, b, c}.size() == 3);
  pool.give_back(b);
  CHECK(pool.take() == b);
  pool.give_back(a);
  pool.give_back(b);
  pool.give_back(c);
  std::set<Item*> again{pool.take(), pool.take(), pool.take()};
  CHECK(again == std::set<Item*>{a, b, c});
}

TEST_CASE("four producers and one consumer: nothing lost, nothing twice, each producer in order") {
  constexpr int producers = 4;
  constexpr std::uint64_t per_producer = 50'000;
  NodePool<Item> pool(64);  // far fewer nodes than items: every node is reused many times
  MpscQueue q;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per_producer; ++i) {
        Item* item;
        while ((item = pool.take()) == nullptr) std::this_thread::yield();
        item->producer = static_cast<std::uint32_t>(p);
        item->seq = i;
        q.push(item);
      }
      ++done;
    });
  }
  std::vector<std::uint64_t> next(producers, 0);
  std::uint64_t received = 0;
  while (received < producers * per_producer) {
    QueueNode* n = q.pop();
    if (n == nullptr) {
      std::this_thread::yield();
      continue;
    }
    auto* item = static_cast<Item*>(n);
    REQUIRE(item->seq == next[item->producer]);
    ++next[item->producer];
    ++received;
    pool.give_back(item);
  }
  for (auto& t : threads) t.join();
  CHECK(q.pop() == nullptr);
  for (int p = 0; p < producers; ++p) CHECK(next[p] == per_producer);
}
