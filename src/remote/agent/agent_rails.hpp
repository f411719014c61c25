// The agent's side of a job's rails: what the controller's RAIL, RAIL_GO, RAIL_EXPECT and RAIL_END
// ask, applied in order with the rest of its messages (AgentWork), the rounds host code starts
// (rig_rail_go), and the records host code receives (rig_rail, Arg::rail).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "remote/io/connection.hpp"
#include "remote/io/reactor.hpp"
#include "remote/job/rails.hpp"
#include "remote/wire/messages.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

// Owner: the agent's work (AgentWork). Threads: the loop, but for host code's rig_rail calls (any
// thread: they write a small round through the rail's link's DirectLane or post to the loop,
// through a record of a fixed table that outlives the job).
// Lifetime: the job's; shut() (or the destructor) stops host code's calls from reaching it.
class AgentRails {
 public:
  using Fail = std::function<void(const std::string& cause)>;
  // `resume`: a round this agent's work waited for has been sent or has arrived.
  AgentRails(Reactor& reactor, Fail fail, std::function<void()> resume);
  ~AgentRails();
  AgentRails(const AgentRails&) = delete;
  AgentRails& operator=(const AgentRails&) = delete;

  void set_controller(Connection* c) { controller_ = c; }
  // How a RAIL's peer is found: the proven connection to the job's agent of that name.
  void set_links(std::function<Connection*(const std::string& name)> find) {
    find_link_ = std::move(find);
  }

  // The controller's messages, in order. RAIL names buffers of `memory` (the job's on this
  // machine) and is answered with RAILED.
  void make(const RailMake& m, const std::map<std::uint64_t, Buffer>& memory);
  void go(const RailGo& m);
  void expect(const RailExpect& m);
  // A round the controller started with no RAIL_READY asked (RAIL_GO `ahead`): later messages
  // that use its memory wait for its arrival, as after RAIL_EXPECT.
  void await(const RailAwait& m);
  void end(const RailEnd& m);
  // Whether `m` must wait: it uses memory of a round still under way here (a RAIL_GO's sources
  // not yet read, a RAIL_EXPECT's or RAIL_AWAIT's destinations not yet all arrived). Work that uses
  // other memory goes on beside the round; work that uses the round's follows it.
  bool holds(const Message& m) const;
  // Whether a round the controller started is still under way here.
  bool busy() const { return !under_way_.empty(); }

  // The word a run receives for rail `id` (the address of its rig_rail), if this machine holds it.
  std::optional<std::uint64_t> record_word(std::uint64_t id) const;

  // Whether this machine holds rail `id` as its destination.
  bool holds_destination(std::uint32_t id) {
    const HeldRail* rail = rails_.find(id);
    return rail != nullptr && !rail->source;
  }
  // What arrives for rails on any of the job's connections.
  void message(Connection& c, const Message& m) { rails_.on_message(c, m); }
  std::span<std::uint8_t> sink(Connection& c, std::size_t bytes) { return rails_.sink(c, bytes); }
  void data(Connection& c, std::size_t bytes, const std::uint8_t* at) {
    rails_.on_data(c, bytes, at);
  }

  // Rounds host code has started on rail `id` (a posted rig_rail_go): the loop starts them.
  void host_go(std::uint32_t id);
  // The job has failed or ended: every count raised, host code's calls reach nothing from now on.
  void shut() noexcept;

 private:
  // A controller round under way here: until it is sent (source) or has arrived (destination),
  // later messages that use its memory wait.
  struct UnderWay {
    std::uint32_t rail;
    std::uint64_t round;
    bool arrived;  // else sent
  };
  // Whether `m` must follow round `u`: it writes memory the round reads, or uses memory the round
  // writes.
  bool conflicts(const Message& m, const UnderWay& u) const;
  HeldRail* held(std::uint32_t id, std::string_view message, bool source);
  void moved(HeldRail& rail, std::uint64_t round, bool arrived);
  void forget_record(HeldRail& rail) noexcept;

  Reactor& reactor_;
  Fail fail_;
  std::function<void()> resume_;
  Connection* controller_ = nullptr;
  std::function<Connection*(const std::string&)> find_link_;
  std::vector<UnderWay> under_way_;
  std::map<std::uint32_t, std::vector<std::uint64_t>> memory_of_;  // each rail's, by id
  std::set<std::uint32_t> let_go_;  // the rails this destination held and has ended (a few bytes)
  bool shut_ = false;
  Rails rails_;
};

}  // namespace rig::remote
