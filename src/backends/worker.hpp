// Worker: an in-order queue of work on a thread of its own, shared by the host and SIM backends.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/device.hpp"

namespace rig::backends {

// Owner: a host or SIM driver. Threads: push and stop from any thread; the work runs on the
// worker's own thread. Lifetime: the driver's; the destructor waits for the thread to finish the
// work in hand, except on the worker's own thread (a device can be dropped by its last work item),
// where the thread finds the stop flag in the state it shares and ends by itself.
class Worker {
 public:
  // Called before each part runs: SIM's simulated latency. May be empty.
  using PartHook = std::function<void()>;

  Worker(detail::DeviceCore& device, PartHook before_part);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void push(detail::Work work);
  // Stops taking work and drops what is queued; never waits.
  void stop() noexcept;
  // After stop: waits, until `until` at the latest, for the work in hand to end and the thread
  // with it. Returns whether the thread has ended (false on the worker's own thread).
  bool settle(std::chrono::steady_clock::time_point until) noexcept;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<detail::Work> queue;
    bool stopping = false;
    bool exited = false;
    std::thread::id thread;
  };
  static void loop(std::shared_ptr<State> state, detail::DeviceCore* device, PartHook hook);

  std::shared_ptr<State> state_;
};

// Runs the parts of `work` on this thread: copies between memory the process addresses directly,
// and host-code runs. Shared by every backend whose memory is process memory.
void run_host_parts(const detail::Work& work, const Worker::PartHook& before_part);

}  // namespace rig::backends
