// What every process of a job shares, controller or agent: its connections, its one root cause,
// and the failure protocol (abort every connection, half-close, drain, close).
#pragma once

#include <list>
#include <memory>
#include <optional>
#include <string>

#include "core/first_cause.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/guard.hpp"
#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"
#include "remote/trust/handshake.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// The parts of a job's state that threads other than the loop read: its root cause. Owner: the
// job and every handle to it. Threads: any; neither call takes a lock.
class JobOutcome {
 public:
  // Records `cause` if none is recorded yet; returns whether it did (the first cause wins).
  bool fail(const std::string& cause) { return cause_.set(cause); }
  std::optional<std::string> cause() const { return cause_.get(); }
  // The cause, owned with `outcome`, for the timelines of the job's devices to share
  // (Timeline::share_cause): they read lost the instant the job reads failed.
  static std::shared_ptr<const rig::detail::FirstCause> shared(
      const std::shared_ptr<JobOutcome>& outcome) {
    return {outcome, &outcome->cause_};
  }

 private:
  rig::detail::FirstCause cause_;
};

// The loop-side base of both roles' protocols (ControllerProtocol, the agent's AgentProtocol): the
// job's connections and its failure protocol. Owner: the role's protocol object, made by connect
// or by an agent's serve. Threads: the loop thread only. Lifetime: until every connection has
// closed after the job ended (finished() is then true).
class JobProtocol : public ConnectionOwner {
 public:
  JobProtocol(Reactor& reactor, const Timing& timing, Key key, InstanceId instance);
  ~JobProtocol() override;

  // Fails the job with `cause` unless it has a root cause already; then aborts every connection.
  void fail(const std::string& cause);
  bool has_failed() const { return outcome_->cause().has_value(); }
  const std::shared_ptr<JobOutcome>& outcome() const { return outcome_; }

  // Whether the job has ended (failed or closed in order) and every connection has closed.
  bool finished() const { return ended_ && connections_.empty(); }

  // Runs `body`, code the loop called back (a connection's report, a ticker, a listener's event,
  // a posted call): a throw fails the job with the exception's text, the root cause as the spec
  // words it. Loop thread.
  template <typename Body>
  void guarded(Body&& body) noexcept {
    guard(std::forward<Body>(body), [this](const std::string& cause) { fail(cause); });
  }

 protected:
  // A new connection the job owns until it closes.
  Connection& add_connection(std::string peer_name);
  // Ends the job in order: no failure follows from connections that end now.
  void mark_ended() { ended_ = true; }
  bool ended() const { return ended_; }
  std::size_t connection_count() const { return connections_.size(); }
  template <typename F>
  void each_connection(F f) {
    for (auto& c : connections_) f(*c);
  }

  // The role's reaction to the job's failure (before the aborts go out), and to its end.
  virtual void on_job_failed(const std::string& cause) noexcept = 0;
  virtual void on_finished() noexcept = 0;
  // A message other than ABORT on an open connection.
  virtual void on_job_message(Connection& c, Message&& m) noexcept = 0;

  // PAYLOAD or DATA bytes; by default they are unexpected, so the job fails.
  virtual void on_job_bulk(Connection& c, std::uint8_t type,
                           std::span<const std::uint8_t> bytes) noexcept;

  // ConnectionOwner, shared by both roles.
  void on_message(Connection& c, Message&& m) noexcept override;
  void on_bulk(Connection& c, std::uint8_t type,
               std::span<const std::uint8_t> bytes) noexcept override {
    on_job_bulk(c, type, bytes);
  }
  void on_failed(Connection& c, const std::string& cause) noexcept override;
  void on_closed(Connection& c) noexcept override;

  Reactor& reactor_;
  const Timing timing_;
  const Key key_;
  const InstanceId instance_;

 private:
  std::shared_ptr<JobOutcome> outcome_ = std::make_shared<JobOutcome>();
  std::list<std::unique_ptr<Connection>> connections_;
  bool ended_ = false;
};

}  // namespace rig::remote
