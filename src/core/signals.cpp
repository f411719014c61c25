#include "core/signals.hpp"

#include <pthread.h>

#include <stdexcept>

#include "core/registry.hpp"

namespace rig::detail {
namespace {

// The mask the thread had before the outermost rig call on its stack; null outside rig calls (and
// inside a wait's open window, where a handler's rig call is an outermost call of its own).
thread_local const sigset_t* caller_mask = nullptr;
thread_local bool submission_held = false;

// Every signal but those the processor raises for the instruction that runs (a fault must stay
// deliverable or the thread would spin on it) and those that cannot be blocked anyway.
const sigset_t& async_signals() {
  static const sigset_t set = [] {
    sigset_t s;
    sigfillset(&s);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&s, sig);
    return s;
  }();
  return set;
}

}  // namespace

SignalsBlocked::SignalsBlocked() noexcept {
  if (caller_mask != nullptr) return;
  pthread_sigmask(SIG_BLOCK, &async_signals(), &caller_);
  caller_mask = &caller_;
  outermost_ = true;
}

SignalsBlocked::~SignalsBlocked() {
  if (!outermost_) return;
  caller_mask = nullptr;
  // Signals that arrived during the call run their handlers here, as the call returns.
  pthread_sigmask(SIG_SETMASK, &caller_, nullptr);
}

SignalsOpen::SignalsOpen() noexcept : saved_caller_(caller_mask) {
  if (saved_caller_ == nullptr) return;
  caller_mask = nullptr;
  pthread_sigmask(SIG_SETMASK, saved_caller_, nullptr);
}

SignalsOpen::~SignalsOpen() {
  if (saved_caller_ == nullptr) return;
  pthread_sigmask(SIG_BLOCK, &async_signals(), nullptr);
  caller_mask = saved_caller_;
}

int poll_signals_open(pollfd* fds, nfds_t count, int timeout_ms) noexcept {
  timespec timeout{};
  timespec* bounded = nullptr;
  if (timeout_ms >= 0) {
    timeout.tv_sec = timeout_ms / 1000;
    timeout.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1'000'000;
    bounded = &timeout;
  }
  const sigset_t* const mask = caller_mask;
  if (mask == nullptr) return ::ppoll(fds, count, bounded, nullptr);
  // A handler runs only inside the wait, where a rig call it makes is an outermost call of its own,
  // as in a SignalsOpen scope.
  caller_mask = nullptr;
  const int rc = ::ppoll(fds, count, bounded, mask);
  caller_mask = mask;
  return rc;
}

SubmissionLock::SubmissionLock() {
  if (submission_held) {
    throw std::invalid_argument(
        "rig: a call from a signal handler or callback needs the submission lock that its own "
        "thread holds in the call it interrupted");
  }
  Registry::get().submission_mutex().lock();
  submission_held = true;
}

SubmissionLock::~SubmissionLock() {
  submission_held = false;
  Registry::get().submission_mutex().unlock();
}

bool holds_submission_lock() noexcept {
  return submission_held;
}

}  // namespace rig::detail
