// The agent's side of a job: listen, then serve one job on the caller's thread: accept and prove
// connections, join the job's other agents, answer the controller, end in order or fail whole.
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <set>

#include "core/arch.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "remote/agent/agent.hpp"
#include "remote/agent/protocol.hpp"
#include "remote/io/address.hpp"
#include "remote/io/dialer.hpp"
#include "remote/job/job.hpp"
#include "remote/job/process.hpp"
#include "remote/job/report.hpp"
#include "remote/limits.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// Owner: the Agent handle. Threads: the caller's.
struct AgentState {
  AgentState(Key k, int f, int p, std::string w)
      : key(std::move(k)), fd(f), port(p), where(std::move(w)) {}
  ~AgentState() {
    if (fd >= 0) ::close(fd);
  }
  AgentState(const AgentState&) = delete;
  AgentState& operator=(const AgentState&) = delete;

  Key key;
  int fd = -1;  // the listening socket, until serve ends
  int port = 0;
  bool served = false;
  std::string where;  // "HOST:PORT" with the port listened at, for errors
};

Agent::Agent(std::unique_ptr<AgentState> s) : s_(std::move(s)) {}
Agent::Agent(Agent&&) noexcept = default;
Agent& Agent::operator=(Agent&&) noexcept = default;
Agent::~Agent() = default;
int Agent::port() const {
  return s_->port;
}

Result<Agent> listen(const Key& key, const std::string& host, int port) {
  const std::string where = address_text(host, port);
  if (port < 0 || port > 65535) return Error("cannot listen at " + where + ": port out of range");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &res);
  if (rc != 0) return Error("cannot listen at " + where + ": " + gai_strerror(rc));
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Error("cannot listen at " + where + ": " + std::strerror(errno));
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    ::close(fd);
    freeaddrinfo(res);
    return Error("cannot listen at " + where + ": " + std::strerror(e));
  }
  freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int actual = 0;
  if (bound.ss_family == AF_INET) {
    actual = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  } else if (bound.ss_family == AF_INET6) {
    actual = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  // From here on errors name the port the system chose, which is the one peers dial.
  const std::string bound_where = address_text(host, actual);
  auto s = std::make_unique<AgentState>(key, fd, actual, bound_where);
  return Agent(std::move(s));
}

Agent adopt_listener(const Key& key, int fd, int port, std::string where) {
  return Agent(std::make_unique<AgentState>(key, fd, port, std::move(where)));
}

int listener_fd(const Agent& agent) {
  return agent.state().fd;
}

namespace {
std::mutex agent_events_mu;
AgentEvents agent_events;

// The caller's events as they are now (set_agent_events may run on another thread meanwhile).
AgentEvents events() {
  std::lock_guard lock(agent_events_mu);
  return agent_events;
}
void log_line(const std::string& line) {
  if (auto f = events().log) f(line);
}
void job_started(const std::string& controller_address) {
  if (auto f = events().started) f(controller_address);
}
void job_joined(const std::vector<std::string>& agents) {
  if (auto f = events().joined) f(agents);
}
}  // namespace

void set_agent_events(AgentEvents e) {
  std::lock_guard lock(agent_events_mu);
  agent_events = std::move(e);
}

namespace {

// serve's loop sleeps here, with the caller's signals open: serve's own steps run with every
// signal blocked, so that a handler never lands inside them, and its waits let handlers run. The
// mask is the wait's own (ppoll): a loop that sleeps after every round on a core the job's
// processes share made three system calls a sleep where one will do.
void wait_with_signals_open(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  (void)rig::detail::poll_signals_open(&p, 1, timeout_ms);  // EINTR: a handler ran; look again
}

}  // namespace

Result<Unit> serve(Agent& a, const std::vector<std::pair<std::string, Opener>>& kinds) {
  AgentState& s = a.state();
  if (s.served) throw std::invalid_argument("rig: serve: this agent has served already");
  std::set<std::string> names;
  for (const auto& k : kinds) {
    if (!names.insert(k.first).second) {
      throw std::invalid_argument("rig: serve: the kind " + k.first + " is named twice");
    }
  }
  s.served = true;
  // The agent stops listening when serve returns or raises, however it ends (the job's listener
  // closes the socket once it has taken it over).
  struct StopListening {
    AgentState& s;
    ~StopListening() {
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
    }
  } stop_listening{s};
  // serve's writes raise SIGPIPE on this thread when a peer resets its connection: blocked while
  // serve runs, its waits included (EPIPE is handled as the connection's end), then the caller's
  // mask comes back.
  sigset_t pipe_only, caller;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &caller);
  struct RestoreMask {
    sigset_t mask;
    ~RestoreMask() {
      // A SIGPIPE left pending by serve is taken here, before the mask returns.
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      timespec zero{};
      while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
      }
      pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    }
  } restore{caller};
  // Every other signal too, but in the loop's waits (wait_with_signals_open).
  const rig::detail::SignalsBlocked blocked;
  int report_fd = -1;
  if (auto report = take_report_descriptor()) {
    if (!*report) return Error(report->error());
    report_fd = **report;
  }
  const pid_t me = getpid();
  const Timing timing = job_timing();
  std::optional<std::string> cause;
  bool interrupted = false;
  std::exception_ptr thrown;
  {
    Reactor reactor(SteadyClock::get(), timing.tick_ms);
    AgentProtocol job(
        reactor, timing, s.key,
        {process_instance(), kinds, tcp_dialer(), log_line, [] { return break_requested(); },
         rig::detail::host_isa_level(), rig::host().budget(), caller, 0, job_started, job_joined});
    const int listen_rc = job.listen(s.fd, s.where);
    s.fd = -1;  // the job owns the socket now and closes it when listening stops
    if (listen_rc != 0) {
      // The loop still runs, to finish closing what the job opened.
      job.shut();
      reactor.run(wait_with_signals_open);
      return Error("cannot listen at " + s.where + ": " + uv_strerror(listen_rc));
    }
    reactor.run(wait_with_signals_open);
    cause = job.outcome()->cause();
    interrupted = job.interrupted();
    thrown = job.thrown();
  }
  if (cause) write_report_line(report_fd, me, "failed " + *cause);
  // Work of a device may still reach memory this process holds: its devices are lost, and the
  // process must exit.
  if (cause) {
    rig::fail(*cause);
    (void)rig::detail::Registry::get().settle(std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(failed_job_host_code_ms));
  }
  if (interrupted) clear_break();
  // Listening has stopped with the loop: what ended serve is raised now.
  if (thrown) std::rethrow_exception(thrown);
  if (interrupted) throw Break();
  if (cause) return Error(*cause);
  write_report_line(report_fd, me, "closed");
  return Unit{};
}

}  // namespace rig::remote
