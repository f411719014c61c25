// Signals and rig's calls. A signal handler (or a callback) may call rig while it interrupts a rig
// call on the same thread. rig keeps that safe the simple way: its calls block the process's
// asynchronous signals while they run, so a handler never lands inside rig's own state, its locks
// or malloc; the calls open them again only where they wait. A handler that runs in such a wait and
// needs a lock its thread holds (the submission lock) gets std::invalid_argument, never a deadlock.
#pragma once

#include <poll.h>
#include <signal.h>

namespace rig::detail {

// Blocks every asynchronous signal for the scope, if this thread is not inside a rig call already
// (an inner guard of the same call does nothing). Owner: the call's stack frame; one thread.
class SignalsBlocked {
 public:
  SignalsBlocked() noexcept;
  ~SignalsBlocked();
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t caller_{};
  bool outermost_ = false;
};

// Gives the caller's own signal mask back for the scope of a wait inside a rig call, so that its
// handlers run while the call waits; a rig call a handler makes then counts as a call of its own.
// Does nothing outside a rig call. Owner: the wait's stack frame; one thread.
class SignalsOpen {
 public:
  SignalsOpen() noexcept;
  ~SignalsOpen();
  SignalsOpen(const SignalsOpen&) = delete;
  SignalsOpen& operator=(const SignalsOpen&) = delete;

 private:
  const sigset_t* saved_caller_ = nullptr;
};

// poll(2) for a wait inside a rig call, with the caller's own signal mask for the wait only: what
// poll inside a SignalsOpen scope does, but the kernel sets the mask and puts it back with the wait
// (ppoll), one system call where that takes three. An agent's loop sleeps here (serve). Outside a
// rig call, poll. Returns what ppoll returns (-1 with EINTR: a handler ran). One thread.
int poll_signals_open(pollfd* fds, nfds_t count, int timeout_ms) noexcept;

// The submission lock (Registry::submission_mutex), held for a scope. Raises std::invalid_argument
// instead of waiting when this thread holds it already: a signal handler or callback that
// interrupted a submission in one of its waits would otherwise wait for itself.
class SubmissionLock {
 public:
  SubmissionLock();
  ~SubmissionLock();
  SubmissionLock(const SubmissionLock&) = delete;
  SubmissionLock& operator=(const SubmissionLock&) = delete;
};

// Whether this thread holds the submission lock.
bool holds_submission_lock() noexcept;

}  // namespace rig::detail
