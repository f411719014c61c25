// Checks made in a child of fork of a job's controller, where doctest cannot report (the child
// leaves with _exit, counting what went wrong): each failed check is named on stderr, and the
// parent checks the child's exit.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "rig/rig.hpp"

namespace rig::test {

// What every use of a job's devices and rails raises (rig::Lost) in a child of its controller.
inline constexpr const char* forked_text =
    "this process is a child of the job's controller (fork): the job's connections belong to the "
    "parent";

// The child's checks. Owner: the child's body; its one thread. Lifetime: the child's.
class ChildChecks {
 public:
  void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "in the child of fork: %s\n", what);
    ++wrong_;
  }
  // `use()` must raise rig::Lost with forked_text.
  template <typename Use>
  void expect_lost(Use&& use, const char* what) {
    try {
      use();
      check(false, what);
    } catch (const rig::Lost& e) {
      check(std::string(e.what()) == forked_text, what);
    } catch (...) {
      check(false, what);
    }
  }
  int wrong() const { return wrong_; }

 private:
  int wrong_ = 0;
};

// Forks; the child runs `body(checks)` and leaves with the count of its failed checks, within
// 10 s (an alarm ends one that waits for ever); the parent requires that it left so, with none.
template <typename Body>
void in_fork_child(Body&& body) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(10);
    ChildChecks checks;
    body(checks);
    _exit(checks.wrong());
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));  // not ended by the alarm: nothing in the child waited for ever
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace rig::test
