// The controller's loop: the one reactor of this process, on a thread of its own, started on the
// first connect. Nothing else knows there is one loop per process: connect makes each job's
// protocol on this reactor, and everything else is handed the reactor it runs on.
#pragma once

#include <functional>
#include <thread>

#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"

namespace rig::remote {

// Owner: the process (made on first use, never destroyed; a child of fork makes its own). Threads:
// call() from any thread but the loop's; the loop runs on a thread of its own.
class Runtime {
 public:
  // The process's runtime, started if needed.
  static Runtime& get();

  // Runs `fn` on the loop thread and returns once it has run.
  void call(std::function<void()> fn);

  Reactor& reactor() { return reactor_; }

 private:
  Runtime();
  Timing timing_;
  Reactor reactor_;
  std::thread thread_;
};

}  // namespace rig::remote
