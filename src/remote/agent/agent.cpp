// The agent's side of a job: listen, then serve one job on the caller's thread: accept and prove
// connections, join the job's other agents, answer the controller, end in order or fail whole.
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>

#include "core/arch.hpp"
#include "core/registry.hpp"
#include "remote/agent/agent.hpp"
#include "remote/agent/agent_work.hpp"
#include "remote/io/address.hpp"
#include "remote/io/listener.hpp"
#include "remote/job/job.hpp"
#include "remote/job/process.hpp"
#include "remote/job/report.hpp"
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
std::mutex agent_log_mu;
std::function<void(const std::string&)> agent_log;

void log_line(const std::string& line) {
  std::function<void(const std::string&)> f;
  {
    std::lock_guard lock(agent_log_mu);
    f = agent_log;
  }
  if (f) f(line);
}
}  // namespace

void set_agent_log(std::function<void(const std::string&)> log) {
  std::lock_guard lock(agent_log_mu);
  agent_log = std::move(log);
}

namespace {

// Owner: serve, on its stack. Threads: the loop thread, which is serve's caller. Lifetime: serve's.
class AgentJob final : public JobProtocol {
 public:
  // Takes over `listen_fd`, a listening socket, and closes it when listening stops. `where` names
  // it in errors ("HOST:PORT"); `kinds` are serve's openers.
  AgentJob(Reactor& reactor, const Timing& timing, const Key& key, int listen_fd, std::string where,
           const std::vector<std::pair<std::string, Opener>>& kinds)
      : JobProtocol(reactor, timing, key, process_instance()),
        where_(std::move(where)),
        listener_(
            reactor.loop(), listen_fd,
            {[this](int fd) { on_socket(fd); }, [this](int err) { on_short_of_resources(err); },
             [this](const std::string& why) { on_accept_failed(why); }}),
        work_(reactor, kinds, [this](const std::string& cause) { fail(cause); }) {
    listen_rc_ = listener_.start();
    ticker_ = reactor_.add_ticker([this](std::int64_t now) { tick(now); });
  }
  ~AgentJob() override { reactor_.remove_ticker(ticker_); }

  int listen_error() const { return listen_rc_; }
  bool interrupted() const { return interrupted_; }
  bool closed_in_order() const { return closed_in_order_; }

  // Stops listening, and drops strangers still proving a key: they have nothing to do with a job
  // that is ending.
  void stop_listening() {
    listener_.stop();
    each_connection([](Connection& c) {
      if (c.tag == stranger && (c.state() == Connection::State::handshaking ||
                                c.state() == Connection::State::connecting)) {
        c.close_now();
      }
    });
  }

  // Ends serve once nothing of the job is left open: the reactor's own handles close and run()
  // returns.
  void shut() {
    if (shut_) return;
    shut_ = true;
    work_.shut();
    stop_listening();
    reactor_.stop();
  }

 private:
  void on_socket(int fd) noexcept {
    Connection& c = add_connection("a connection");
    c.tag = stranger;
    const ListenerConfig config{instance_};
    c.adopt(fd, Handshake::listener(key_, config));
  }

  // The connection waits in the kernel's backlog meanwhile; the operator hears of it once.
  void on_short_of_resources(int err) noexcept {
    log_line("cannot accept a connection at " + where_ + ": " + std::strerror(err) +
             ": accepting again in " + seconds_text(static_cast<std::int64_t>(accept_retry_ms)));
  }

  // serve ends with this cause, and so does a job it serves.
  void on_accept_failed(const std::string& why) noexcept {
    fail("cannot accept a connection at " + where_ + ": " + why);
  }

  std::optional<JobId> serving_job(Connection&) noexcept override { return job_; }

  void on_proven(Connection& c) noexcept override {
    const Peer& peer = c.peer();
    if (peer.role == Role::controller) {
      if (controller_ != nullptr || ended()) {
        c.close_now();  // a second connection from the job's controller: nothing to say to it
        return;
      }
      job_ = peer.job;
      controller_ = &c;
      my_name_ = peer.our_name;
      c.set_peer_name("controller");
      c.tag = controller_tag;
      work_.set_controller(&c);
      controller_since_ms_ = reactor_.now_ms();
      log_line("started by the controller at " + c.peer_address() + ", which names this agent " +
               my_name_);
      return;
    }
    // Another agent of the job, dialed or accepted.
    c.set_peer_name(peer.name);
    c.tag = agent_tag;
    ++links_proven_;
    maybe_ready();
  }

  void on_refused(Connection& c, const std::string& why) noexcept override {
    // One of our own dials to another agent of the job: the job cannot form.
    if (c.tag == dial_tag) fail(c.peer_name() + ": " + why);
    // A stranger (wrong key, another job, silence): dropped; the agent goes on serving.
  }

  void on_job_message(Connection& c, Message&& m) noexcept override {
    if (c.tag == controller_tag) return from_controller(c, std::move(m));
    if (std::holds_alternative<Close>(m)) {
      // That agent is ending the job in order: its connection's end is no failure.
      c.end(std::nullopt);
      return;
    }
    const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
    fail(c.peer_name() + ": malformed message: " + std::string(name) +
         " is not one an agent sends to another");
  }

  void on_job_bulk(Connection& c, std::uint8_t type,
                   std::span<const std::uint8_t> bytes) noexcept override {
    if (c.tag != controller_tag || type != Payload::type || !ready_sent_) {
      return JobProtocol::on_job_bulk(c, type, bytes);
    }
    work_.payload(bytes.size(), bytes.data());
  }

  std::span<std::uint8_t> bulk_sink(Connection& c, std::uint8_t type,
                                    std::size_t bytes) noexcept override {
    if (c.tag != controller_tag || type != Payload::type || !ready_sent_) return {};
    return work_.payload_sink(bytes);
  }

  // Only a sink this job gave (PAYLOAD from the controller) places bytes.
  void on_bulk_placed(Connection&, std::uint8_t, std::size_t bytes) noexcept override {
    work_.payload(bytes, nullptr);
  }

  void from_controller(Connection& c, Message&& m) {
    if (auto* join = std::get_if<Join>(&m)) return on_join(*join);
    if (AgentWork::handles(m)) {
      if (!ready_sent_) {
        return fail("controller: malformed message: " +
                    std::string(std::visit([](const auto& x) { return x.name; }, m)) +
                    " before the job started");
      }
      try {
        work_.message(std::move(m));
      } catch (const std::exception& e) {
        // Nothing may unwind through the loop: an error of our own ends the job, named.
        fail(e.what());
      }
      return;
    }
    if (std::holds_alternative<Close>(m)) {
      // End in order: release the job, tell the controller, and stop listening.
      closed_in_order_ = true;
      mark_ended();
      work_.close();
      c.send(Closed{});
      c.end(std::nullopt);
      each_connection([](Connection& other) {
        if (other.tag == agent_tag && other.state() == Connection::State::open) {
          other.end(Close{});
        }
      });
      stop_listening();
      return;
    }
    const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
    fail("controller: malformed message: " + std::string(name) + " is not one a controller sends");
  }

  void on_join(const Join& join) {
    if (joined_) return fail("controller: malformed message: JOIN twice");
    if (join.names.size() != join.addresses.size()) {
      return fail("controller: malformed message: JOIN: " + std::to_string(join.names.size()) +
                  " names and " + std::to_string(join.addresses.size()) + " addresses");
    }
    std::size_t me = join.names.size();
    for (std::size_t i = 0; i < join.names.size(); ++i) {
      if (join.names[i] == join.you) me = i;
    }
    if (me == join.names.size()) {
      return fail("controller: malformed message: JOIN: '" + join.you + "' is not among the names");
    }
    joined_ = true;
    join_ms_ = reactor_.now_ms();
    my_name_ = join.you;
    links_expected_ = join.names.size() - 1;
    for (std::size_t i = me + 1; i < join.names.size(); ++i) {
      auto address = parse_address(join.addresses[i]);
      if (!address) {
        return fail("controller: malformed message: JOIN: the address of " + join.names[i] + ": " +
                    address.error());
      }
      // Numeric addresses resolve without a lookup; a name that needs DNS blocks the loop for
      // that lookup, once, at the job's start.
      auto resolved = resolve(address->host, address->port);
      if (!resolved) return fail(join.names[i] + ": " + resolved.error());
      Connection& c = add_connection(join.names[i]);
      c.tag = dial_tag;
      DialerConfig config{Role::agent, my_name_, *job_, join.names[i], instance_};
      c.dial(reinterpret_cast<const sockaddr*>(&*resolved), Handshake::dialer(key_, config));
    }
    maybe_ready();
  }

  void maybe_ready() {
    if (!joined_ || ready_sent_ || links_proven_ < links_expected_ || has_failed()) return;
    ready_sent_ = true;
    controller_->send(Ready{rig::detail::host_isa_level(), rig::host().budget()});
  }

  void tick(std::int64_t now) {
    if (break_requested() && !interrupted_) {
      interrupted_ = true;
      if (job_ && !ended()) {
        fail("interrupted");
      } else {
        mark_ended();
        stop_listening();
        if (finished()) shut();
      }
      return;
    }
    if (has_failed() || ended()) return;
    work_.tick();
    if (has_failed()) return;
    if (controller_ && !joined_ && now - controller_since_ms_ >= timing_.handshake_timeout_ms) {
      return fail("controller: sent no JOIN within " + seconds_text(timing_.handshake_timeout_ms));
    }
    if (joined_ && !ready_sent_ && now - join_ms_ >= timing_.handshake_timeout_ms) {
      return fail(my_name_ + ": the job's other agents did not all connect within " +
                  seconds_text(timing_.handshake_timeout_ms));
    }
  }

  // Nothing new may join a failed job.
  void on_job_failed(const std::string&) noexcept override {
    work_.shut();
    stop_listening();
  }

  void on_finished() noexcept override { shut(); }

  static constexpr std::uint64_t stranger = 0, controller_tag = 1, agent_tag = 2, dial_tag = 3;

  const std::string where_;
  Listener listener_;
  int listen_rc_ = 0;
  std::uint64_t ticker_ = 0;
  std::optional<JobId> job_;
  Connection* controller_ = nullptr;
  std::string my_name_;
  std::int64_t controller_since_ms_ = 0;
  std::int64_t join_ms_ = 0;
  bool joined_ = false;
  bool ready_sent_ = false;
  std::size_t links_expected_ = 0;
  std::size_t links_proven_ = 0;
  bool closed_in_order_ = false;
  bool interrupted_ = false;
  bool shut_ = false;
  AgentWork work_;
};

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
  int report_fd = -1;
  if (auto report = take_report_descriptor()) {
    if (!*report) return Error(report->error());
    report_fd = **report;
  }
  const pid_t me = getpid();
  const Timing timing = job_timing();
  std::optional<std::string> cause;
  bool interrupted = false;
  // serve's writes raise SIGPIPE on this thread when a peer resets its connection: blocked while
  // serve runs (EPIPE is handled as the connection's end), then the caller's mask comes back.
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
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
  } restore{previous};
  {
    Reactor reactor(SteadyClock::get(), timing.tick_ms);
    AgentJob job(reactor, timing, s.key, s.fd, s.where, kinds);
    s.fd = -1;  // the job owns the socket now and closes it when listening stops
    if (job.listen_error() != 0) {
      // The loop still runs, to finish closing what the job opened.
      job.shut();
      reactor.run();
      return Error("cannot listen at " + s.where + ": " + uv_strerror(job.listen_error()));
    }
    reactor.run();
    cause = job.outcome()->cause();
    interrupted = job.interrupted();
  }
  if (cause) write_report_line(report_fd, me, "failed " + *cause);
  if (interrupted) {
    clear_break();
    if (cause) rig::fail(*cause);
    throw Break();
  }
  if (cause) {
    // Work of a device may still reach memory this process holds: its devices are lost, and the
    // process must exit.
    rig::fail(*cause);
    return Error(*cause);
  }
  write_report_line(report_fd, me, "closed");
  return Unit{};
}

}  // namespace rig::remote
