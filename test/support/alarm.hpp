// SIGALRM to one thread, every so often, for tests of what a signal handler may do while it
// interrupts that thread (rig's calls, malloc).
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace rig::test {

// Installs `handler` for SIGALRM and sends the signal to the constructing thread every
// `period_ns` (a process-wide signal could land on any thread). Owner: the test's stack frame;
// the thread that made it. Lifetime: the scope; the destructor stops the timer first, then gives
// SIGALRM its default action back.
class ThreadAlarm {
 public:
  ThreadAlarm(void (*handler)(int), long period_ns) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    REQUIRE(sigaction(SIGALRM, &sa, nullptr) == 0);
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = gettid();
    REQUIRE(timer_create(CLOCK_MONOTONIC, &ev, &timer_) == 0);
    const itimerspec every{{0, period_ns}, {0, period_ns}};
    REQUIRE(timer_settime(timer_, 0, &every, nullptr) == 0);
  }
  ~ThreadAlarm() {
    const itimerspec off{};
    timer_settime(timer_, 0, &off, nullptr);
    timer_delete(timer_);
    signal(SIGALRM, SIG_DFL);
  }
  ThreadAlarm(const ThreadAlarm&) = delete;
  ThreadAlarm& operator=(const ThreadAlarm&) = delete;

 private:
  timer_t timer_{};
};

}  // namespace rig::test
