// The controller's side of a process: the reactor's thread, started on the first connect, and the
// way other threads run code on it.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"
#include "remote/job/process.hpp"

namespace rig::remote {

// A one-shot event other threads wait on. Threads: any.
class Signal {
 public:
  // Notifies under the lock: a waiter that sees the event may destroy the Signal at once (it often
  // lives on the waiter's stack), so nothing may touch it after the lock is released.
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool is_set() const {
    std::lock_guard lock(mu_);
    return set_;
  }
  // Waits up to `ms`; returns whether the event happened.
  bool wait_for_ms(std::int64_t ms) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

// Owner: the process (made on first use, never destroyed; a child of fork makes its own). Threads:
// post() and call() from any thread but the loop's; the loop runs on a thread of its own.
class Runtime {
 public:
  // The process's runtime, started if needed.
  static Runtime& get();

  // Runs `fn` on the loop thread, later.
  void post(std::function<void()> fn);
  // Runs `fn` on the loop thread and returns once it has run.
  void call(std::function<void()> fn);

  Reactor& reactor() { return reactor_; }
  const Timing& timing() const { return timing_; }
  bool on_loop_thread() const { return reactor_.on_loop_thread(); }

 private:
  Runtime();
  Timing timing_;
  Reactor reactor_;
  std::thread thread_;
};

}  // namespace rig::remote
