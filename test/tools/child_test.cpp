// tools/child, the one way our programs start children: what a child is given (arguments, the
// environment with changes, descriptors, a core, its own group), what comes back (lines, the rest,
// wait statuses), and the error of a program that cannot run.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "child/child.hpp"

namespace {

// A child running `script` in /bin/sh, its stdout on a pipe; the pid and the pipe's read end.
struct Shell {
  pid_t pid = -1;
  int out = -1;
  std::string pending;

  explicit Shell(const std::string& script, rig::child::Spec spec = {}) {
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    spec.argv = {"/bin/sh", "-c", script};
    spec.stdout_fd = p[1];
    const auto r = rig::child::spawn(spec);
    close(p[1]);
    out = p[0];
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
    pid = *r;
  }
  ~Shell() {
    close(out);
    if (pid > 0) (void)rig::child::wait_exit(pid);
  }
  std::string line() { return rig::child::read_line(out, pending, 10'000).value_or("(none)"); }
  int status() {
    const int s = rig::child::wait_exit(pid);
    pid = -1;
    return s;
  }
};

}  // namespace

TEST_CASE("lines are read one at a time; what came after a line is kept for the next call") {
  Shell sh("printf 'one\\ntwo\\nthree'; exit 3");
  CHECK(sh.line() == "one");
  CHECK(sh.pending == "two\nthree");  // one read took it all: the rest waits here, not in the pipe
  CHECK(sh.line() == "two");
  // The last bytes have no newline: no line, and read_all hands them back with the rest.
  CHECK(rig::child::read_line(sh.out, sh.pending, 10'000) == std::nullopt);
  CHECK(rig::child::read_all(sh.out, sh.pending) == "three");
  const int s = sh.status();
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 3);
}

TEST_CASE("read_line gives up at its deadline while the child says nothing") {
  Shell sh("exec sleep 5");
  CHECK(rig::child::read_line(sh.out, sh.pending, 50) == std::nullopt);
  CHECK_FALSE(rig::child::wait_for(sh.pid, 20).has_value());  // still running
  kill(sh.pid, SIGKILL);
  const auto s = rig::child::wait_for(sh.pid, 10'000);
  REQUIRE(s.has_value());
  CHECK(WIFSIGNALED(*s));
  CHECK(WTERMSIG(*s) == SIGKILL);
  sh.pid = -1;
}

TEST_CASE("the environment's changes replace ours, a bare name removes one, the rest is kept") {
  REQUIRE(setenv("RIG_TEST_CHILD_KEPT", "ours", 1) == 0);
  REQUIRE(setenv("RIG_TEST_CHILD_SET", "ours", 1) == 0);
  REQUIRE(setenv("RIG_TEST_CHILD_GONE", "ours", 1) == 0);
  rig::child::Spec spec;
  spec.env = {"RIG_TEST_CHILD_SET=theirs", "RIG_TEST_CHILD_GONE", "RIG_TEST_CHILD_NEW=new"};
  Shell sh(
      "echo \"$RIG_TEST_CHILD_KEPT,$RIG_TEST_CHILD_SET,${RIG_TEST_CHILD_GONE-unset},"
      "$RIG_TEST_CHILD_NEW\"; env | grep -c '^RIG_TEST_CHILD_SET='",
      spec);
  CHECK(sh.line() == "ours,theirs,unset,new");
  CHECK(sh.line() == "1");  // set once, not shadowed by our value
  unsetenv("RIG_TEST_CHILD_KEPT");
  unsetenv("RIG_TEST_CHILD_SET");
  unsetenv("RIG_TEST_CHILD_GONE");
}

TEST_CASE("a kept descriptor is open in the child; every other of ours is closed at exec") {
  int kept[2], other[2];
  REQUIRE(pipe2(kept, O_CLOEXEC) == 0);
  REQUIRE(pipe2(other, O_CLOEXEC) == 0);
  rig::child::Spec spec;
  spec.keep_fds = {kept[1]};
  const std::string k = std::to_string(kept[1]), o = std::to_string(other[1]);
  Shell sh(
      "(echo >&" + k + ") 2>/dev/null && echo kept; (echo >&" + o + ") 2>/dev/null || echo closed",
      spec);
  CHECK(sh.line() == "kept");
  CHECK(sh.line() == "closed");
  // Only in the child: ours still closes at exec.
  CHECK((fcntl(kept[1], F_GETFD) & FD_CLOEXEC) != 0);
  for (int fd : {kept[0], kept[1], other[0], other[1]}) close(fd);
}

TEST_CASE("a child runs on the one core it is given, in its own group when asked") {
  rig::child::Spec spec;
  spec.cpu = 0;
  spec.own_group = true;
  Shell sh("grep Cpus_allowed_list /proc/self/status | tr -d ' \\t'; cut -d' ' -f5 /proc/$$/stat",
           spec);
  CHECK(sh.line() == "Cpus_allowed_list:0");
  CHECK(sh.line() == std::to_string(sh.pid));
}

TEST_CASE("a program that cannot run is an Error naming it, and leaves no child behind") {
  rig::child::Spec missing;
  missing.argv = {"/nonexistent/rig-test-program"};
  auto r = rig::child::spawn(missing);
  REQUIRE(!r.ok());
  CHECK(r.error() == "cannot run '/nonexistent/rig-test-program': No such file or directory");

  rig::child::Spec searched;
  searched.argv = {"no-such-program-for-rig"};
  searched.search_path = true;
  r = rig::child::spawn(searched);
  REQUIRE(!r.ok());
  CHECK(r.error() == "cannot run 'no-such-program-for-rig': No such file or directory");

  char plain[] = "/tmp/rig-test-child-XXXXXX";  // a file without the execute bit
  const int fd = mkstemp(plain);
  REQUIRE(fd >= 0);
  close(fd);
  rig::child::Spec not_executable;
  not_executable.argv = {plain};
  r = rig::child::spawn(not_executable);
  unlink(plain);
  REQUIRE(!r.ok());
  CHECK(r.error() == "cannot run '" + std::string(plain) + "': Permission denied");

  rig::child::Spec no_core;
  no_core.argv = {"/bin/true"};
  no_core.cpu = CPU_SETSIZE - 1;
  r = rig::child::spawn(no_core);
  REQUIRE(!r.ok());
  CHECK(r.error() ==
        "cannot run '/bin/true' on core " + std::to_string(CPU_SETSIZE - 1) + ": Invalid argument");

  CHECK(rig::child::spawn({}).error() == "cannot run an empty command");
  // Each failed child was reaped by spawn: none is left to wait for.
  CHECK(waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("a name is found in PATH when asked, and the file run can differ from argv[0]") {
  rig::child::Spec spec;
  spec.search_path = true;
  Shell sh("echo $0", spec);  // argv[0] "/bin/sh" holds a '/': run as given
  CHECK(sh.line() == "/bin/sh");

  int p[2];
  REQUIRE(pipe2(p, O_CLOEXEC) == 0);
  rig::child::Spec named;
  named.argv = {"sh", "-c", "echo $0"};
  named.search_path = true;
  named.stdout_fd = p[1];
  auto r = rig::child::spawn(named);
  REQUIRE(r.ok());
  close(p[1]);
  std::string pending;
  CHECK(rig::child::read_line(p[0], pending, 10'000) == "sh");
  (void)rig::child::wait_exit(*r);

  int q[2];
  REQUIRE(pipe2(q, O_CLOEXEC) == 0);
  rig::child::Spec other_file;
  other_file.file = "/bin/sh";
  other_file.argv = {"a-name-only", "-c", "echo $0"};
  other_file.stdout_fd = q[1];
  r = rig::child::spawn(other_file);
  REQUIRE(r.ok());
  close(q[1]);
  pending.clear();
  CHECK(rig::child::read_line(q[0], pending, 10'000) == "a-name-only");
  (void)rig::child::wait_exit(*r);
  close(p[0]);
  close(q[0]);
}
