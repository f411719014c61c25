// The submission queue: how calls from any thread, or from a signal handler that interrupts one,
// reach the loop thread without a lock or an allocation.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rig::remote {

// A link in an intrusive queue. Commands derive from it.
struct QueueNode {
  std::atomic<QueueNode*> next{nullptr};
};

// A multi-producer, single-consumer intrusive queue (Vyukov's): push is one atomic exchange and
// one store, so it is wait-free and async-signal-safe; pop is for the loop thread alone.
//
// Owner: the reactor. Threads: push from any thread or signal handler; pop from the loop thread
// only. Lifetime: the reactor's; nodes stay owned by whoever pushed them.
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

  // Whether nothing is queued, not even half pushed. Consumer only; a node found here is one pop()
  // returns now or, if its push is half done, very soon.
  bool empty() const noexcept {
    return tail_ == &sentinel_ && head_.load(std::memory_order_acquire) == &sentinel_;
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

  // The oldest node whose push has begun, or nullptr once the queue is empty: a push half done
  // (its pusher between the exchange and the store) is waited for, yielding the core, where pop()
  // would say "not yet". For a consumer that must see every node pushed before some event it
  // observed (an answer to a message whose node was pushed before the message left): pop() can
  // return nullptr while such a node is queued, when a later push is half done behind it. The wait
  // is the pusher's two instructions, longer only if it is preempted between them. Consumer only.
  QueueNode* pop_pushed() noexcept {
    for (;;) {
      if (QueueNode* node = pop()) return node;
      if (empty()) return nullptr;
      sched_yield();
    }
  }

 private:
  std::atomic<QueueNode*> head_;  // where producers push
  QueueNode* tail_;               // where the consumer pops; consumer-only
  QueueNode sentinel_;
};

}  // namespace rig::remote
