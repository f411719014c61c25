#include "remote/runtime.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "rig/remote.hpp"

namespace rig::remote {
namespace {

// Commands of the controller's calls that may allocate (job start and close); the submission path
// of remote devices uses preallocated nodes instead.
struct FnCommand final : Command {
  std::function<void()> fn;
  void run(Reactor&) noexcept override {
    fn();
    delete this;
  }
};

std::mutex timing_mu;
Timing next_timing;

std::atomic<bool> break_flag{false};

void on_sigint(int) {
  request_break();
}

}  // namespace

Runtime::Runtime() : timing_(job_timing()), reactor_(SteadyClock::get(), timing_.tick_ms) {
  thread_ = std::thread([this] {
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

void Runtime::post(std::function<void()> fn) {
  auto* c = new FnCommand();
  c->fn = std::move(fn);
  reactor_.post(c);
}

void Runtime::call(std::function<void()> fn) {
  Signal done;
  post([&] {
    fn();
    done.set();
  });
  while (!done.wait_for_ms(1000)) {
  }
}

void set_job_timing(const Timing& timing) {
  std::lock_guard lock(timing_mu);
  next_timing = timing;
}

Timing job_timing() {
  std::lock_guard lock(timing_mu);
  return next_timing;
}

bool break_requested() noexcept {
  return break_flag.load(std::memory_order_acquire);
}
void clear_break() noexcept {
  break_flag.store(false, std::memory_order_release);
}

void request_break() noexcept {
  break_flag.store(true, std::memory_order_release);
}

void catch_break(bool on) {
  struct sigaction sa {};
  sa.sa_handler = on ? on_sigint : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace rig::remote
