// The launch suite's engines: network namespaces with Debian's sshd in them, made and removed by
// the test itself (198.18.0.0/15, the range set aside for such tests).
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rig::test {

// Why this machine cannot run the tests of `engine` ("ssh", "slurm"): not root, no network
// namespaces, no sshd, no slurmctld, slurmd or munged; or nothing.
std::string launch_unavailable(const std::string& engine);

// What a command printed and how it ended.
struct Ran {
  int status = -1;  // its exit status; -1 if it did not exit by itself
  std::string out, err;
  double seconds = 0;  // from its start to its end
};

// Engine::ssh: two hosts, node1 (198.18.0.1) and node2 (198.18.0.2), each a network namespace
// with an sshd of its own, bridged to a third, the launcher's (198.18.0.254), where rig run and its
// controller run. Engine::slurm: three nodes, n1 to n3 (198.18.0.1 to .3), each a network and UTS
// namespace with its slurmd, the launcher's namespace with slurmctld (host name ctl), one munged,
// and SLURM_CONF set in this process for every command. There `ssh` is a wrapper that adds the
// test's ssh_config (host names, the key pair the test made, the host key it made), as a user's
// ~/.ssh/config would. Owner: one test case; thread: its own (and one that drains each sshd's log);
// lifetime: the case. The destructor kills every process left in the namespaces, removes them and
// the test's directory; namespaces that a crashed run left (their pid gone) are removed by the next
// one, and its sshds die with it (parent-death signal).
class Net {
 public:
  enum class Engine { ssh, slurm };
  explicit Net(Engine engine = Engine::ssh);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // The test's private directory (ssh's files, scripts, rig run's output).
  const std::string& dir() const { return dir_; }
  // argv (looked up in PATH, the ssh wrapper's folder first) in the launcher's namespace, waited
  // for up to timeout_ms (then killed, status -1).
  Ran run(const std::vector<std::string>& argv, int timeout_ms) const;
  // The same, started only: its pid. stdin, stdout and stderr as given (-1: this process's).
  pid_t start(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd) const;
  // The processes in the hosts' namespaces but for their daemons (sshd, slurmd).
  std::vector<pid_t> strays() const;
  // Whether strays() is empty within timeout_ms: a host notices the end of a session on its own.
  bool no_strays_within(int timeout_ms) const;
  // The processes in host `part`'s namespace ("n2") but for its daemon.
  std::vector<pid_t> strays_of(const std::string& part) const;
  // Makes host `part` a blackhole, or ends that: an nft table in its namespace drops everything
  // it sends or receives but on its loopback, its link still up, as a host whose network fails
  // without a word (no reset, no unreachable).
  void blackhole(const std::string& part, bool on) const;
  // Engine::slurm: waits until sinfo says every node is idle, up to 30 s (a REQUIRE that fails
  // with what sinfo and slurmctld said).
  void wait_slurm_idle() const;
  // The processes in the launcher's namespace.
  std::vector<pid_t> in_launcher() const;

 private:
  void setup();
  void start_sshd();
  void start_slurm();
  void teardown();
  std::vector<std::string> parts() const;  // the namespaces' names after prefix_
  std::string ns(const std::string& part) const { return prefix_ + part; }
  std::vector<pid_t> in_namespace(const std::string& name) const;

  Engine engine_;
  std::size_t hosts_;
  std::string prefix_;  // riglaunch-PID-
  std::string dir_;
  std::vector<pid_t> sshd_;    // the hosts' daemons, which strays() leaves out
  std::vector<pid_t> others_;  // the other daemons (munged, slurmctld)
  std::vector<int> sshd_logs_;
  std::vector<std::thread> drains_;
};

// rig run's exit statuses for a job that could not start (tools/rig/commands.hpp): the tests
// write them out, so that a change of the documented numbers shows.
inline constexpr int exit_failure = 1;  // the job failed, or rig run was interrupted
inline constexpr int exit_unresolved = 10;
inline constexpr int exit_unreachable = 11;
inline constexpr int exit_no_rigd = 12;
inline constexpr int exit_agent_silent = 13;
inline constexpr int exit_srun = 14;
// The most a whole rig run of the remote example may take.
inline constexpr int run_timeout_ms = 60'000;

// The environment variable `name`, which meson sets for the launch suite.
std::string env(const char* name);

}  // namespace rig::test
