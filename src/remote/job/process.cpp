#include "remote/job/process.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "rig/remote.hpp"

namespace rig::remote {
namespace {

std::mutex timing_mu;
Timing next_timing;

std::atomic<bool> break_flag{false};

void on_sigint(int) {
  request_break();
}

}  // namespace

const InstanceId& process_instance() {
  static InstanceId id = new_instance_id();
  static pid_t owner = getpid();
  if (owner != getpid()) {
    id = new_instance_id();
    owner = getpid();
  }
  return id;
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
