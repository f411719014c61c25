// The controller's side of a job's protocol, on the loop: dial every agent and prove the key, JOIN,
// READY, the agents' answers in order, the DATA of copies into this process's memory put in place,
// CLOSE, and the start's deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remote/controller/job_state.hpp"
#include "remote/controller/link.hpp"
#include "remote/controller/member.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/dialer.hpp"
#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"
#include "remote/job/job.hpp"
#include "remote/job/rails.hpp"
#include "remote/trust/handshake.hpp"

namespace rig::remote {

// Owner: whoever makes it (connect: the callback it hands in deletes it). Threads: the loop thread
// only. Lifetime: until `finished` has been called and has returned; it reaches nothing global, so
// a test may run it on a reactor of its own, on a manual clock.
class ControllerProtocol final : public JobProtocol, public RailSide {
 public:
  // Called once every connection has closed after the job ended, on the loop; the protocol may be
  // destroyed once the call has returned, not during it.
  using Finished = std::function<void(ControllerProtocol& self)>;

  // `state` is the handle's state this job fills in (hosts, started, finished, the flow control,
  // the report); `proxies` makes the machines' devices; `dialer` (which must outlive the protocol)
  // makes the connection to each member: tcp_dialer() in real jobs.
  ControllerProtocol(Reactor& reactor, const Timing& timing, Key key, InstanceId instance, JobId id,
                     std::shared_ptr<JobState> state, std::vector<Member> members,
                     std::unique_ptr<Proxies> proxies, Dialer& dialer, Finished finished);
  ~ControllerProtocol() override;

  // Dials every agent.
  void start();
  // Sends one write to agent `index`: a message and the frames after it. `expect`, unless empty
  // (a FREE, an UNLOAD), joins what the agent owes. If the job has failed or closed, a round
  // trip's reply learns so at once.
  // `keep` holds the memory the pieces point at until the write is done or given up.
  void send(std::size_t index, Bytes owned, rig::detail::PoolVector<Connection::Piece> pieces,
            std::optional<Expect> expect, std::shared_ptr<const void> keep = {});
  // Sends CLOSE to every agent.
  void close();

  // Fails the job if one of its hosts or proxies was lost here other than by a close. The tick
  // looks every tick_ms; connect asks at once, so that it never starts beside a failed job.
  void notice_losses();

  // RailSide: the job's rails, each kept here from rail() until its last handle goes.
  void add_rail(RailPlan plan, std::shared_ptr<Reply> source_reply,
                std::shared_ptr<Reply> destination_reply) override;
  void go_rail(std::uint32_t id, std::uint64_t round, rig::detail::Work work, bool ahead) override;
  void end_rail(std::uint32_t id) override;

 private:
  void on_proven(Connection& c) noexcept override;
  void on_refused(Connection& c, const std::string& why) noexcept override;
  void on_failed(Connection& c, const std::string& cause) noexcept override;
  void on_job_message(Connection& c, Message&& m) noexcept override;
  void on_job_bulk(Connection& c, std::uint8_t type,
                   std::span<const std::uint8_t> bytes) noexcept override;
  std::span<std::uint8_t> bulk_sink(Connection& c, std::uint8_t type,
                                    std::size_t bytes) noexcept override;
  void on_bulk_placed(Connection& c, std::uint8_t type, std::size_t bytes) noexcept override;
  void on_job_failed(const std::string& cause) noexcept override;
  void on_finished() noexcept override;

  void message(Connection& c, Message&& m);
  // DATA bytes for the copies of the work `c`'s agent reports next; `from` null: bulk_sink put
  // them in place already.
  void receive_data(Connection& c, std::uint8_t type, std::size_t bytes, const std::uint8_t* from);
  // Member `index`, if the job can still send to it, with `expect` (unless empty) added to what it
  // owes; else null, and a round trip's reply has learnt why.
  Member* owed(std::size_t index, std::optional<Expect> expect);
  Member* owed_now(std::size_t index, std::optional<Expect> expect);
  // What submitters wrote themselves (JobState::written) joins what their agents owe.
  void take_written();
  // An answer of the agent: it must be what the head of its queue expects.
  void answer(Connection& c, Member& member, Expect::Kind kind, Message&& m);
  // REACHED from `c`'s agent: the value it names, and every one of its device due before it, are
  // reached.
  void reached(const Connection& c, Member& member, const Reached& r);
  // The start of the cause of a malformed message from `c`'s agent (built only on a failure: the
  // answers it would precede are the hot path).
  static std::string malformed(const Connection& c);
  std::vector<Device> opened(Member& member, std::size_t index, const Opened& o);
  // A host or proxy of member `member` (device `id` at its agent), whose timeline reads lost with
  // the job's cause from the instant the job reads failed.
  std::shared_ptr<rig::detail::DeviceCore> make_device(std::size_t member, std::uint32_t id,
                                                       rig::detail::DeviceInfo info);
  void started();
  void tick(std::int64_t now);
  // Fails the job if `c`'s agent greeted with the instance id of another member's: one agent
  // listed under two spellings (127.0.0.1:P and localhost:P), which connect's comparison of the
  // texts cannot see. Returns whether it did.
  bool listed_twice(const Connection& c);

  // A rail of the job, and the controller's rounds on it not yet arrived (their work is held so
  // that its buffers live, and returns to the rail's flow control at arrival).
  struct KeptRail {
    RailPlan plan;
    std::deque<std::pair<std::uint64_t, rig::detail::Work>> rounds;
  };
  void rail_count(Connection& c, const RailCount& m);
  // Rounds of `rail` up to `value` have arrived at its destination.
  void rail_arrived(KeptRail& rail, std::uint64_t value);
  Connection* member_connection(std::size_t index);

  const std::shared_ptr<JobState> state_;
  std::vector<Member> members_;
  const std::unique_ptr<Proxies> proxies_;
  Dialer& dialer_;
  const Finished finished_;
  const JobId id_;
  std::size_t proven_ = 0;
  std::size_t ready_ = 0;
  std::int64_t join_sent_ms_ = 0;
  bool closing_ = false;
  std::uint64_t ticker_ = 0;
  std::map<std::uint32_t, KeptRail> rails_;
  std::uint32_t rails_made_ = 0;  // the highest rail id kept so far: a count for one ended since
                                  // is no longer news
  Rails own_rails_;               // the rails this process's host is an end of
};

}  // namespace rig::remote
