// The submission queue: how calls from any thread, or from a signal handler that interrupts one,
// reach the loop thread without a lock or an allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace rig::remote {

// A link in an intrusive queue. Commands derive from it.
struct QueueNode {
  std::atomic<QueueNode*> next{nullptr};
};

// A multi-producer, single-consumer intrusive queue (Vyukov's): push is one atomic exchange and
// one store, so it is wait-free and async-signal-safe; pop is for the loop thread alone.
//
// Owner: the reactor. Threads: push from any thread or signal handler; pop from the loop thread
// only. Lifetime: the reactor's; nodes stay owned by whoever pushed them (the pool).
class MpscQueue {
 public:
  MpscQueue() : head_(&sentinel_), tail_(&sentinel_) {}
  MpscQueue(const MpscQueue&) = delete;
  MpscQueue& operator=(const MpscQueue&) = delete;

  void push(QueueNode* node) noexcept {
    node->next.store(nullptr, std::memory_order_relaxed);
    QueueNode* prev = head_.exchange(node, std::memory_order_acq_rel);
    // Between the exchange and this store the queue is briefly cut; pop sees it as "not yet" and
    // the loop retries on its next wake-up (the pusher's uv_async_send follows this store).
    prev->next.store(node, std::memory_order_release);
  }

  // The oldest node, or nullptr if the queue is empty or a push is half done.
  QueueNode* pop() noexcept {
    QueueNode* tail = tail_;
    QueueNode* next = tail->next.load(std::memory_order_acquire);
    if (tail == &sentinel_) {
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;  // a push is half done
    push(&sentinel_);
    next = tail->next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    return nullptr;
  }

 private:
  std::atomic<QueueNode*> head_;  // where producers push
  QueueNode* tail_;               // where the consumer pops; consumer-only
  QueueNode sentinel_;
};

// A fixed set of preallocated nodes with a lock-free free list, so that taking and returning a
// node never calls malloc and never waits for a lock (a signal handler may interrupt a thread
// anywhere, including inside malloc). The free list is a stack of indices whose head carries a
// generation count, so a node taken and returned between another thread's read and its
// compare-exchange cannot be mistaken for the old head (the ABA problem).
//
// Owner: the reactor. Threads: any, and signal handlers. Lifetime: the reactor's.
template <typename T>
class NodePool {
 public:
  explicit NodePool(std::uint32_t count)
      : count_(count),
        values_(std::make_unique<T[]>(count)),
        next_free_(std::make_unique<std::atomic<std::uint32_t>[]>(count)) {
    for (std::uint32_t i = 0; i < count; ++i) next_free_[i].store(i + 1, std::memory_order_relaxed);
    head_.store(pack(0, 0), std::memory_order_relaxed);
  }
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

  // A free node, or nullptr when every node is in use.
  T* take() noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint32_t index = index_of(head);
      if (index >= count_) return nullptr;
      const std::uint32_t next = next_free_[index].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(next, generation_of(head) + 1),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        return &values_[index];
      }
    }
  }

  void give_back(T* node) noexcept {
    const auto index = static_cast<std::uint32_t>(node - values_.get());
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      next_free_[index].store(index_of(head), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(index, generation_of(head) + 1),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        return;
      }
    }
  }

  std::uint32_t capacity() const noexcept { return count_; }

 private:
  static std::uint64_t pack(std::uint32_t index, std::uint32_t generation) {
    return (std::uint64_t{generation} << 32) | index;
  }
  static std::uint32_t index_of(std::uint64_t v) { return static_cast<std::uint32_t>(v); }
  static std::uint32_t generation_of(std::uint64_t v) {
    return static_cast<std::uint32_t>(v >> 32);
  }

  const std::uint32_t count_;
  std::unique_ptr<T[]> values_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> next_free_;  // the free list's links, by index
  std::atomic<std::uint64_t> head_;
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
};

}  // namespace rig::remote
