#include <doctest/doctest.h>

#include <atomic>
#include <new>
#include <thread>
#include <vector>

#include "core/pool.hpp"
#include "remote/io/queue.hpp"

using rig::remote::MpscQueue;
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

TEST_CASE("four producers and one consumer: nothing lost, nothing twice, each producer in order") {
  constexpr int producers = 4;
  constexpr std::uint64_t per_producer = 50'000;
  // Nodes come from the block pool, as submissions' commands do: far fewer blocks than items, so
  // every block is reused many times, and a block is given back while others are being pushed.
  MpscQueue q;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per_producer; ++i) {
        auto* item = new (rig::detail::pool_allocate(sizeof(Item))) Item();
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
    item->~Item();
    rig::detail::pool_release(item, sizeof(Item));
  }
  for (auto& t : threads) t.join();
  CHECK(q.pop() == nullptr);
  for (int p = 0; p < producers; ++p) CHECK(next[p] == per_producer);
}

TEST_CASE("pop_pushed hands over every node whose push returned, whatever other pushes are doing") {
  // The controller's loop relies on this: a submitter pushes its message's node and only then
  // writes the message, so when the answer arrives the node must come out, even while another
  // thread is between the two steps of a later push. pop() stops at such a push: on a 2-core VM
  // about 8 rounds in 10 of this test see a drain that stops short with pop().
  constexpr int rounds = 10;
  constexpr int producers = 4;
  constexpr std::uint64_t per_producer = 100'000;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    MpscQueue q;
    std::atomic<std::uint64_t> pushed{0};  // pushes that have returned
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&] {
        for (std::uint64_t i = 0; i < per_producer; ++i) {
          q.push(new (rig::detail::pool_allocate(sizeof(Item))) Item());
          pushed.fetch_add(1, std::memory_order_seq_cst);
        }
      });
    }
    std::uint64_t received = 0;
    std::uint64_t short_drains = 0;
    while (received < producers * per_producer) {
      const std::uint64_t seen = pushed.load(std::memory_order_seq_cst);
      while (QueueNode* n = q.pop_pushed()) {
        ++received;
        static_cast<Item*>(n)->~Item();
        rig::detail::pool_release(n, sizeof(Item));
      }
      if (received < seen) ++short_drains;
    }
    for (auto& t : threads) t.join();
    CHECK(short_drains == 0);
    CHECK(received == producers * per_producer);
    CHECK(q.pop_pushed() == nullptr);
  }
}
