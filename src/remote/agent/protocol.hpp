// The agent's side of a job's protocol, on the loop: accept and prove connections, take the
// controller's JOIN and connect to the job's other agents, READY, then answer the controller (its
// work through AgentWork) until it closes the job in order, or the job fails.
#pragma once

#include <signal.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "remote/agent/agent_work.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/dialer.hpp"
#include "remote/io/listener.hpp"
#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"
#include "remote/job/job.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// How many strangers an agent lets wait at once when its process may open `descriptors_max`
// descriptors (RLIMIT_NOFILE's soft limit): strangers_descriptor_percent of them, within
// strangers_min and strangers_max (remote/limits.hpp).
std::size_t strangers_cap(std::uint64_t descriptors_max);
// The same for this process's limit now.
std::size_t strangers_cap();

// Owner: serve, on its stack (or a test or simulation). Threads: the loop thread only, which is
// serve's caller. Lifetime: serve's; it reaches nothing global, so a simulation may run several
// on reactors of their own, each with its own instance id, on a manual clock.
class AgentProtocol final : public JobProtocol {
 public:
  // What the protocol is handed besides its reactor, timing and key. `kinds` (serve's openers) and
  // `dialer` must outlive it.
  struct Setup {
    InstanceId instance;
    const std::vector<std::pair<std::string, Opener>>& kinds;
    Dialer& dialer;
    // A line for the operator's log ("started by the controller at ...", a shortage that holds up
    // an accept); may be empty.
    std::function<void(const std::string& line)> log;
    // Whether a break was requested (Ctrl-C, SIGTERM): looked at on every tick; may be empty.
    std::function<bool()> break_requested;
    // What READY tells the controller of this machine's host.
    std::string host_arch;
    std::uint64_t host_budget = 0;
    // The signal mask openers run with (serve's caller's); empty: the loop thread's.
    std::optional<sigset_t> program_signals;
    // How many strangers may wait at once (0: strangers_cap of this process's descriptor limit).
    std::size_t strangers_max = 0;
    // Called once a controller has proven the key, with its address, so that this agent serves
    // its job (rigd's job process stops making way for a new key from then on); may be empty.
    std::function<void(const std::string& controller_address)> started = nullptr;
    // Called once the controller has named the job's agents (JOIN), with their names escaped
    // (printable); may be empty.
    std::function<void(const std::vector<std::string>& agents)> joined = nullptr;
  };

  AgentProtocol(Reactor& reactor, const Timing& timing, const Key& key, Setup setup);
  ~AgentProtocol() override;

  // Listens on `listen_fd`, a listening socket it takes over (and closes when listening stops),
  // named `where` ("HOST:PORT") in errors: each socket it accepts goes to accept(). 0, or a libuv
  // error code (the caller then shuts the job).
  int listen(int listen_fd, std::string where);
  // A connection accepted (connected already): it must prove the key, as every stranger must. At
  // the cap of strangers the oldest is dropped first.
  void accept(std::unique_ptr<Transport> transport);
  // Strangers waiting now: accepted connections that have not proven the key and are not closed.
  std::size_t strangers() const { return strangers_.size(); }
  // The cap on them, and how many were dropped to make room so far.
  std::size_t strangers_max() const { return strangers_max_; }
  std::uint64_t strangers_dropped() const { return dropped_; }
  // Whether the job still takes connections: false once it ends or fails.
  bool accepting() const { return accepting_; }

  // Whether a controller has proven the key, so that this agent serves its job.
  bool serving() const { return job_.has_value(); }
  bool interrupted() const { return interrupted_; }
  bool closed_in_order() const { return closed_in_order_; }
  // The first exception that ended one of serve's own steps (an accept, a handshake's report, a
  // message, a tick), if any: the job failed with its text, and serve raises it again.
  std::exception_ptr thrown() const { return thrown_; }

  // Stops listening, and turns away strangers still proving a key (a controller that came as the
  // job ends hears why): they have nothing to do with a job that is ending.
  void stop_listening();
  // Ends serve once nothing of the job is left open: the reactor's own handles close and run()
  // returns.
  void shut();

 private:
  void on_socket(int fd) noexcept;
  // Out of descriptors or memory at an accept: drops the oldest stranger, if there is one.
  bool make_room(int err) noexcept;
  // Closes the oldest stranger not closing already, to make room for a newer one; whether there
  // was one. `why` says for the log what was short.
  bool drop_oldest_stranger(const std::string& why);
  // A stranger that proved the key or closed is one no longer.
  void forget_stranger(Connection& c);
  // The log of drops, and the memory strangers gave back, on the tick.
  void strangers_tick(std::int64_t now);
  void on_closed(Connection& c) noexcept override;
  void on_short_of_resources(int err) noexcept;
  void shortage(int err);
  void on_accept_failed(const std::string& why) noexcept;
  void log(const std::string& line) const;

  std::optional<JobId> serving_job(Connection&) noexcept override { return job_; }
  void on_proven(Connection& c) noexcept override;
  void proven(Connection& c);
  void on_refused(Connection& c, const std::string& why) noexcept override;
  void on_job_message(Connection& c, Message&& m) noexcept override;
  void message(Connection& c, Message&& m);
  void on_job_bulk(Connection& c, std::uint8_t type,
                   std::span<const std::uint8_t> bytes) noexcept override;
  std::span<std::uint8_t> bulk_sink(Connection& c, std::uint8_t type,
                                    std::size_t bytes) noexcept override;
  void on_bulk_placed(Connection&, std::uint8_t, std::size_t bytes) noexcept override;
  void on_job_failed(const std::string&) noexcept override;
  void on_finished() noexcept override;

  // Runs one of serve's own steps: a throw fails the job with its text, and is kept for serve to
  // raise again.
  template <typename Body>
  void step(Body&& body) noexcept {
    guard(std::forward<Body>(body), [this](const std::string& why) { threw(why); });
  }
  // Called inside the handler of what a step threw.
  void threw(const std::string& why) noexcept;

  void from_controller(Message&& m);
  void end_in_order();
  void on_join(const Join& join);
  void maybe_ready();
  void tick(std::int64_t now);

  // A stranger dropped to make room, or proven and not yet given its role, is no longer counted.
  static constexpr std::uint64_t stranger = 0, controller_tag = 1, agent_tag = 2, dial_tag = 3,
                                 former_stranger = 4;

  Setup setup_;
  std::string where_;
  std::optional<Listener> listener_;
  // The strangers, oldest first (the tag of each is `stranger`), and their cap.
  std::deque<Connection*> strangers_;
  std::size_t strangers_max_;
  std::uint64_t dropped_ = 0;         // strangers dropped to make room, in all
  std::uint64_t dropped_logged_ = 0;  // how many of them the log has counted
  std::int64_t dropped_logged_ms_ = 0;
  std::size_t gone_since_trim_ = 0;  // strangers closed since memory was last handed back
  std::int64_t trimmed_ms_ = 0;
  bool accepting_ = true;
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
  std::vector<std::string> join_names_;  // the job's machines, as JOIN lists them
  std::vector<std::string> linked_;      // the other agents proven so far
  bool closed_in_order_ = false;
  bool interrupted_ = false;
  bool shut_ = false;
  std::exception_ptr thrown_;
  AgentWork work_;
};

}  // namespace rig::remote
