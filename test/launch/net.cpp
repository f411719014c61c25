#include "net.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "child/child.hpp"

namespace rig::test {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* sshd_path = "/usr/sbin/sshd";
constexpr const char* netns_dir = "/run/netns";
constexpr const char* ns_prefix = "riglaunch-";
constexpr int setup_timeout_ms = 10'000;  // each setup command, and each sshd's first line
constexpr const char* launcher_address = "198.18.0.254/24";
constexpr const char* blackhole_table = "rig_blackhole";  // Net::blackhole's nft table
const std::vector<std::string> host_addresses = {"198.18.0.1", "198.18.0.2", "198.18.0.3"};
constexpr int slurm_ready_timeout_ms = 30'000;  // slurmctld up and every node idle

// Runs argv to its end; its status and what it printed (stdout and stderr together).
std::pair<int, std::string> command(const std::vector<std::string>& argv) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {-1, "pipe"};
  child::Spec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.stdout_fd = out[1];
  spec.stderr_fd = out[1];
  auto pid = child::spawn(spec);
  close(out[1]);
  if (!pid) {
    close(out[0]);
    return {-1, pid.error()};
  }
  std::string text = child::read_all(out[0]);
  close(out[0]);
  const auto status = child::wait_for(*pid, setup_timeout_ms);
  if (!status) {
    kill(*pid, SIGKILL);
    child::wait_exit(*pid);
    return {-1, text + "(timed out)"};
  }
  return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, text};
}

void must(const std::vector<std::string>& argv) {
  const auto [status, text] = command(argv);
  std::string line;
  for (const auto& a : argv) line += a + " ";
  REQUIRE_MESSAGE(status == 0, line << ": " << text);
}

void write_file(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The network namespace a process is in, as /proc names it ("net:[4026532]"); empty if it is gone.
std::string net_of(pid_t pid) {
  std::error_code ec;
  const auto target = fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/net", ec);
  return ec ? std::string() : target.string();
}

// The namespace `path` (/run/netns/NAME) is, as net_of writes it.
std::string net_at(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return "net:[" + std::to_string(st.st_ino) + "]";
}

// Removes the namespaces of runs whose process is gone (a crash), and everything in them.
void remove_leftovers() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(netns_dir, ec)) {
    const std::string name = entry.path().filename();
    if (!name.starts_with(ns_prefix)) continue;
    const pid_t owner = std::atoi(name.c_str() + std::strlen(ns_prefix));
    if (owner > 0 && (kill(owner, 0) == 0 || errno != ESRCH)) continue;  // a live run's
    const std::string net = net_at(entry.path());
    for (const auto& p : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = std::atoi(p.path().filename().c_str());
      if (pid > 0 && net_of(pid) == net) kill(pid, SIGKILL);
    }
    command({"ip", "netns", "del", name});
  }
}

}  // namespace

std::string launch_unavailable(const std::string& engine) {
  if (geteuid() != 0) return "needs root (network namespaces, the engines' daemons)";
  const std::vector<std::pair<std::string, std::string>> needs =
      engine == "slurm"
          ? std::vector<std::pair<std::string, std::string>>{{"/usr/sbin/slurmctld", "slurm-wlm"},
                                                             {"/usr/sbin/slurmd", "slurm-wlm"},
                                                             {"/usr/bin/srun", "slurm-wlm"},
                                                             {"/usr/sbin/munged", "munge"},
                                                             {"/usr/sbin/nft", "nftables"}}
          : std::vector<std::pair<std::string, std::string>>{{sshd_path, "openssh-server"},
                                                             {"/usr/bin/ssh", "openssh-client"},
                                                             {"/usr/sbin/nft", "nftables"}};
  for (const auto& [path, package] : needs) {
    if (access(path.c_str(), X_OK) != 0) {
      return "no " + path + " (Debian's " + package + "; tools/deps.sh installs it)";
    }
  }
  const std::string probe = std::string(ns_prefix) + std::to_string(getpid()) + "-probe";
  const auto [status, text] = command({"ip", "netns", "add", probe});
  if (status != 0) return "cannot make a network namespace: " + text;
  command({"ip", "netns", "del", probe});
  return {};
}

Net::Net(Engine engine)
    : engine_(engine),
      hosts_(engine == Engine::ssh ? 2 : 3),
      prefix_(std::string(ns_prefix) + std::to_string(getpid()) + "-") {
  // A setup that fails part way is undone as the destructor would, which does not run then.
  try {
    setup();
  } catch (...) {
    teardown();
    throw;
  }
}

Net::~Net() {
  teardown();
}

void Net::setup() {
  remove_leftovers();
  char templ[] = "/tmp/rig-launch-XXXXXX";
  REQUIRE(mkdtemp(templ) != nullptr);
  dir_ = templ;
  // The launcher's namespace with a bridge; each host's, with a veth to the bridge.
  const std::string l = ns("l");
  must({"ip", "netns", "add", l});
  must({"ip", "-n", l, "link", "set", "lo", "up"});
  must({"ip", "-n", l, "link", "add", "br0", "type", "bridge"});
  must({"ip", "-n", l, "addr", "add", launcher_address, "dev", "br0"});
  must({"ip", "-n", l, "link", "set", "br0", "up"});
  for (std::size_t i = 0; i < hosts_; ++i) {
    const std::string h = ns("n" + std::to_string(i + 1)), v = "v" + std::to_string(i + 1);
    must({"ip", "netns", "add", h});
    must({"ip", "-n", h, "link", "set", "lo", "up"});
    must({"ip", "-n", l, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", h});
    must({"ip", "-n", l, "link", "set", v, "master", "br0", "up"});
    must({"ip", "-n", h, "addr", "add", host_addresses[i] + "/24", "dev", "eth0"});
    must({"ip", "-n", h, "link", "set", "eth0", "up"});
  }
  if (engine_ == Engine::ssh) {
    start_sshd();
  } else {
    start_slurm();
  }
}

void Net::start_sshd() {
  // The keys: the hosts' (one for both), the user's, and one no host knows.
  for (const char* key : {"host_key", "id", "stranger_id"}) {
    must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", dir_ + "/" + key});
  }
  write_file(dir_ + "/authorized_keys", read_file(dir_ + "/id.pub"));
  std::istringstream host_pub(read_file(dir_ + "/host_key.pub"));
  std::string type, blob;
  host_pub >> type >> blob;
  write_file(dir_ + "/known_hosts", "198.18.0.* " + type + " " + blob + "\n");
  write_file(dir_ + "/sshd_config",
             "Port 22\n"
             "HostKey " +
                 dir_ +
                 "/host_key\n"
                 "AuthorizedKeysFile " +
                 dir_ +
                 "/authorized_keys\n"
                 "PermitRootLogin prohibit-password\n"
                 "PasswordAuthentication no\n"
                 "KbdInteractiveAuthentication no\n"
                 "UsePAM no\n"
                 "StrictModes no\n"
                 "PidFile none\n");
  // What a user's ~/.ssh/config would say: names for the hosts, and the test's cases.
  write_file(dir_ + "/ssh_config",
             "Host node1\n  HostName 198.18.0.1\n"
             "Host node2\n  HostName 198.18.0.2\n"
             "Host closed\n  HostName 198.18.0.1\n  Port 2222\n"
             "Host stranger\n  HostName 198.18.0.2\n"
             "  IdentityFile " +
                 dir_ +
                 "/stranger_id\n"
                 "Host ghost\n  HostName ghost.invalid\n"
                 "Host * !stranger\n  IdentityFile " +
                 dir_ +
                 "/id\n"
                 "Host *\n  User root\n"
                 "  IdentitiesOnly yes\n"
                 "  UserKnownHostsFile " +
                 dir_ +
                 "/known_hosts\n"
                 "  GlobalKnownHostsFile /dev/null\n"
                 "  StrictHostKeyChecking yes\n"
                 "  ControlMaster no\n");
  fs::create_directory(dir_ + "/bin");
  write_file(dir_ + "/bin/ssh",
             "#!/bin/sh\nexec /usr/bin/ssh -F '" + dir_ + "/ssh_config' \"$@\"\n", 0700);
  // sshd refuses to start without its privilege separation directory, which its package's
  // service makes at boot.
  fs::create_directories("/run/sshd");
  for (std::size_t i = 0; i < hosts_; ++i) {
    int err[2];
    REQUIRE(pipe2(err, O_CLOEXEC) == 0);
    child::Spec spec;
    spec.argv = {"nsenter",
                 "--net=" + std::string(netns_dir) + "/" + ns("n" + std::to_string(i + 1)),
                 sshd_path,
                 "-D",
                 "-e",
                 "-f",
                 dir_ + "/sshd_config"};
    spec.search_path = true;
    spec.stderr_fd = err[1];
    spec.parent_death_signal = SIGKILL;
    auto pid = child::spawn(spec);
    close(err[1]);
    REQUIRE_MESSAGE(pid, (pid ? "" : pid.error()));
    sshd_.push_back(*pid);
    std::string pending;
    const auto line = child::read_line(err[0], pending, setup_timeout_ms);
    REQUIRE_MESSAGE((line && line->starts_with("Server listening on")),
                    "sshd on " << host_addresses[i] << " said: " << line.value_or("nothing"));
    // Its log, read to its end so that sshd never waits on a full pipe.
    drains_.emplace_back([fd = err[0]] { (void)child::read_all(fd); });
    sshd_logs_.push_back(err[0]);
  }
}

// Starts `argv` in the background, its output in the test's directory (`log`), killed if the test
// dies.
static pid_t start_daemon(const std::vector<std::string>& argv, const std::string& log) {
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  child::Spec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.stdin_fd = in;
  spec.stdout_fd = fd;
  spec.stderr_fd = fd;
  spec.parent_death_signal = SIGKILL;
  auto pid = child::spawn(spec);
  close(fd);
  close(in);
  REQUIRE_MESSAGE(pid, (pid ? "" : pid.error()));
  return *pid;
}

void Net::start_slurm() {
  const std::string conf = dir_ + "/slurm.conf";
  // munged wants every directory above its socket searchable by all; the files stay private.
  chmod(dir_.c_str(), 0711);
  for (const char* sub : {"/state", "/spool"}) fs::create_directory(dir_ + sub);
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string key(1024, '\0');
    random.read(key.data(), static_cast<std::streamsize>(key.size()));
    write_file(dir_ + "/munge.key", key, 0600);
  }
  std::string nodes;
  for (std::size_t i = 0; i < hosts_; ++i) {
    nodes += "NodeName=n" + std::to_string(i + 1) + " NodeAddr=" + host_addresses[i] +
             " CPUs=2 State=UNKNOWN\n";
  }
  write_file(conf,
             "ClusterName=riglaunch\n"
             "SlurmctldHost=ctl(198.18.0.254)\n"
             "SlurmUser=root\nSlurmdUser=root\n"
             "AuthType=auth/munge\nCredType=cred/munge\n"
             "AuthInfo=socket=" +
                 dir_ +
                 "/munge.socket\n"
                 "StateSaveLocation=" +
                 dir_ +
                 "/state\n"
                 "SlurmdSpoolDir=" +
                 dir_ +
                 "/spool/%n\n"
                 "SlurmctldPidFile=" +
                 dir_ +
                 "/slurmctld.pid\n"
                 "SlurmdPidFile=" +
                 dir_ +
                 "/slurmd-%n.pid\n"
                 "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                 "JobAcctGatherType=jobacct_gather/none\n"
                 "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                 "MpiDefault=none\nMailProg=/bin/true\n"
                 "SlurmdTimeout=10\nReturnToService=2\n" +
                 nodes + "PartitionName=all Nodes=n[1-" + std::to_string(hosts_) +
                 "] Default=YES MaxTime=INFINITE State=UP\n",
             0644);
  setenv("SLURM_CONF", conf.c_str(), 1);
  others_.push_back(
      start_daemon({"munged", "-F", "--key-file=" + dir_ + "/munge.key",
                    "--socket=" + dir_ + "/munge.socket", "--pid-file=" + dir_ + "/munged.pid",
                    "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munge.seed"},
                   dir_ + "/munged.out"));
  // slurmctld and each slurmd find themselves by host name: a UTS namespace each (ip netns exec
  // would remount /sys, which slurmd then trips on).
  others_.push_back(
      start_daemon({"nsenter", "--net=" + std::string(netns_dir) + "/" + ns("l"), "unshare",
                    "--uts", "sh", "-c", "hostname ctl && exec slurmctld -D -i"},
                   dir_ + "/slurmctld.log"));
  for (std::size_t i = 0; i < hosts_; ++i) {
    const std::string n = "n" + std::to_string(i + 1);
    sshd_.push_back(
        start_daemon({"nsenter", "--net=" + std::string(netns_dir) + "/" + ns(n), "unshare",
                      "--uts", "sh", "-c", "hostname " + n + " && exec slurmd -D -N " + n},
                     dir_ + "/slurmd-" + n + ".log"));
  }
  wait_slurm_idle();
}

void Net::wait_slurm_idle() const {
  // Slurm says nothing when it is ready: its nodes' state is looked at until all are idle.
  const auto until = Clock::now() + std::chrono::milliseconds(slurm_ready_timeout_ms);
  std::string last;
  for (;;) {
    const auto [status, text] =
        command({"nsenter", "--net=" + std::string(netns_dir) + "/" + ns("l"), "sinfo", "-h", "-N",
                 "-o", "%T"});
    last = text;
    std::size_t idle = 0;
    for (std::size_t at = 0; (at = text.find("idle", at)) != std::string::npos; at += 4) ++idle;
    if (status == 0 && idle == hosts_) break;
    REQUIRE_MESSAGE(Clock::now() < until,
                    "Slurm not ready: sinfo said: " << last << "slurmctld: "
                                                    << read_file(dir_ + "/slurmctld.log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::vector<std::string> Net::parts() const {
  std::vector<std::string> out = {"l"};
  for (std::size_t i = 0; i < hosts_; ++i) out.push_back("n" + std::to_string(i + 1));
  return out;
}

void Net::teardown() {
  for (const pid_t pid : sshd_) kill(pid, SIGKILL);
  for (const pid_t pid : sshd_) child::wait_exit(pid);
  for (const pid_t pid : others_) kill(pid, SIGKILL);
  for (const pid_t pid : others_) child::wait_exit(pid);
  for (const std::string& part : parts()) {
    for (const pid_t pid : in_namespace(ns(part))) kill(pid, SIGKILL);
  }
  for (auto& t : drains_) t.join();
  for (const int fd : sshd_logs_) close(fd);
  for (const std::string& part : parts()) command({"ip", "netns", "del", ns(part)});
  if (engine_ == Engine::slurm) unsetenv("SLURM_CONF");
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

pid_t Net::start(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd) const {
  child::Spec spec;
  spec.argv = {"nsenter", "--net=" + std::string(netns_dir) + "/" + ns("l")};
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.search_path = true;
  const char* path = std::getenv("PATH");
  // The C locale: the messages the tests expect from env and srun are their plain ASCII ones.
  spec.env = {"PATH=" + dir_ + "/bin:" + (path ? path : "/usr/bin:/bin"), "LC_ALL=C"};
  spec.stdin_fd = in_fd;
  spec.stdout_fd = out_fd;
  spec.stderr_fd = err_fd;
  auto pid = child::spawn(spec);
  REQUIRE_MESSAGE(pid, (pid ? "" : pid.error()));
  return *pid;
}

Ran Net::run(const std::vector<std::string>& argv, int timeout_ms) const {
  const std::string out = dir_ + "/run.out", err = dir_ + "/run.err";
  const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto t0 = Clock::now();
  const pid_t pid = start(argv, null_fd, out_fd, err_fd);
  for (int fd : {out_fd, err_fd, null_fd}) close(fd);
  Ran r;
  auto status = child::wait_for(pid, timeout_ms);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!status) {
    kill(pid, SIGKILL);
    child::wait_exit(pid);
  } else if (WIFEXITED(*status)) {
    r.status = WEXITSTATUS(*status);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::vector<pid_t> Net::in_namespace(const std::string& name) const {
  const std::string net = net_at(std::string(netns_dir) + "/" + name);
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const pid_t pid = std::atoi(p.path().filename().c_str());
    if (pid > 0 && !net.empty() && net_of(pid) == net) found.push_back(pid);
  }
  return found;
}

std::vector<pid_t> Net::strays_of(const std::string& part) const {
  std::vector<pid_t> found;
  for (const pid_t pid : in_namespace(ns(part))) {
    if (std::find(sshd_.begin(), sshd_.end(), pid) == sshd_.end()) found.push_back(pid);
  }
  return found;
}

void Net::blackhole(const std::string& part, bool on) const {
  const std::string in_ns = "--net=" + std::string(netns_dir) + "/" + ns(part);
  if (!on) {
    must({"nsenter", in_ns, "nft", "delete", "table", "inet", blackhole_table});
    return;
  }
  // Both ways: what comes in is dropped, and what the host sends goes nowhere; its loopback
  // (its own daemons' talk) is left alone.
  const std::string t = std::string("inet ") + blackhole_table;
  auto chain = [&](const std::string& name, const std::string& hook, const std::string& dev) {
    return "add chain " + t + " " + name + " { type filter hook " + hook +
           " priority 0; policy drop; }; add rule " + t + " " + name + " " + dev + " lo accept; ";
  };
  must({"nsenter", in_ns, "nft",
        "add table " + t + "; " + chain("in", "input", "iif") + chain("out", "output", "oif")});
}

std::vector<pid_t> Net::strays() const {
  std::vector<pid_t> found;
  for (const std::string& part : parts()) {
    if (part == "l") continue;
    for (const pid_t pid : in_namespace(ns(part))) {
      if (std::find(sshd_.begin(), sshd_.end(), pid) == sshd_.end()) found.push_back(pid);
    }
  }
  return found;
}

bool Net::no_strays_within(int timeout_ms) const {
  // The hosts' ends come on their own time; there is no event here to wait on but the look.
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (strays().empty()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> Net::in_launcher() const {
  return in_namespace(ns("l"));
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, std::string(name) << " is not set (meson sets it)");
  return v;
}

}  // namespace rig::test
