#include "remote/controller/runtime.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "remote/controller/post.hpp"
#include "remote/io/clock.hpp"
#include "remote/job/process.hpp"

namespace rig::remote {

Runtime::Runtime() : timing_(job_timing()), reactor_(SteadyClock::get(), timing_.tick_ms) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "rig-loop");  // as top -H and /proc show it
    // The loop thread takes no signal of the application's: they belong to its own threads. A
    // write to a connection the peer has reset raises SIGPIPE on the writing thread; blocked here,
    // it stays pending and harmless while the write's EPIPE is handled as the connection's end.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    reactor_.run();
  });
  thread_.detach();  // lives as long as the process
}

Runtime& Runtime::get() {
  static std::mutex mu;
  static Runtime* runtime = nullptr;
  static pid_t owner = 0;
  std::lock_guard lock(mu);
  if (runtime == nullptr || owner != getpid()) {
    // First use, or a child of fork: the parent's loop thread does not exist here and its sockets
    // belong to the parent's job, so the child starts a runtime of its own (the parent's is
    // abandoned, never touched).
    runtime = new Runtime();
    owner = getpid();
  }
  return *runtime;
}

void Runtime::call(std::function<void()> fn) {
  call_function(reactor_, std::move(fn));
}

}  // namespace rig::remote
