// The link between a job's protocol on the loop and the drivers of its devices, both ways, each
// side seeing only an interface: JobLink is how a RemoteDriver or ProxyModule reaches its job
// (send to a member, a submission, a round trip, the connections' flow control); Proxies is how
// the protocol makes its machines' devices and tells their drivers of work reached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "core/device.hpp"
#include "core/pool.hpp"
#include "remote/controller/flow.hpp"
#include "remote/controller/member.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/reactor.hpp"
#include "remote/job/rail_count.hpp"
#include "remote/wire/messages.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

class JobLink;

// One rail as the controller's loop keeps it (controller/rail.hpp makes it): who its ends are,
// what each agent end is told, the controller's own memory if it is an end, and the counts.
struct RailPlan {
  static constexpr std::size_t controller = static_cast<std::size_t>(-1);
  std::uint32_t id = 0;
  std::size_t source = controller;  // a member's index, or the controller
  std::size_t destination = controller;
  std::vector<WireRailPart> source_parts;  // as the messages name them
  std::vector<WireRailPart> destination_parts;
  std::vector<std::span<std::byte>> own_parts;  // the controller's end's memory, if it is one
  std::shared_ptr<const void> keep;             // holds that memory
  std::shared_ptr<RailCounts> counts;
  // The rail's device on this process, whose timeline is the controller's rounds arrived (the
  // core orders work with the rounds through it), and what each round counts against its flow.
  std::shared_ptr<rig::detail::DeviceCore> device;
  std::function<void(const rig::detail::Work& round)> round_arrived;
};

// A driver of one of the job's devices whose work the agent of a member orders with the work sent
// to it (a rail between two agents, at either end): a proxy of that member's machine never waits
// for it before sending. Owner: its device. Threads: any.
class OrderedByAgent {
 public:
  virtual bool ordered_by(std::size_t member) const noexcept = 0;

 protected:
  ~OrderedByAgent() = default;
};

// What a proxy's run may take as an object argument (Arg::Object): a rail, named on the wire by its
// number. Owner: its handles. Threads: any.
class RailObject : public rig::detail::RunObject {
 public:
  virtual std::uint32_t rail_id() const noexcept = 0;
};

// The protocol's side of the job's rails, for the rail handles. Owner: the protocol. Threads: the
// loop (calls come through JobLink::with_rails).
class RailSide {
 public:
  virtual ~RailSide() = default;
  // Keeps `plan` and sends RAIL to each agent end, whose RAILED answers `replies` (source's,
  // destination's; null for the controller's end).
  virtual void add_rail(RailPlan plan, std::shared_ptr<Reply> source_reply,
                        std::shared_ptr<Reply> destination_reply) = 0;
  // The controller's round `round` of rail `id`: `work` (the core's) is held until it arrives.
  // `ahead`: no work at the destination is still to come before the round (RailDriver::enqueue),
  // so the destination is not asked for RAIL_READY.
  virtual void go_rail(std::uint32_t id, std::uint64_t round, rig::detail::Work work,
                       bool ahead) = 0;
  // The last handle of rail `id` has gone: its ends let go of it.
  virtual void end_rail(std::uint32_t id) = 0;
};

// One submission on its way to the loop: everything enqueue built, in a block of the block pool,
// posted without a std::function (whose captures would come from malloc). Owner: the submitter
// until it posts, then the loop, which runs it once and frees it. Threads: built on the
// submitter's thread (maybe in a signal handler), run and destroyed on the loop thread.
struct Submission final : Command {
  std::shared_ptr<JobLink> link;  // keeps the job's state alive until the loop has it
  std::size_t member = 0;
  Bytes owned;
  rig::detail::PoolVector<Connection::Piece> pieces;
  Expect expect;
  std::shared_ptr<const void> keep;  // the copies' source buffers, until written

  // Frees a submission (run, or never posted).
  struct Free {
    void operator()(Submission* s) const noexcept {
      s->~Submission();
      rig::detail::pool_release(s, sizeof(Submission));
    }
  };
  using Owned = std::unique_ptr<Submission, Free>;
  static Owned make() {
    return Owned(new (rig::detail::pool_allocate(sizeof(Submission))) Submission());
  }

  void run(Reactor&) noexcept override;
};

// A job as the drivers of its devices see it. Owner: the job's state (JobState); drivers hold it
// weakly, and keep the state alive while they use it. Threads: any, but for deliver (the loop's).
class JobLink {
 public:
  virtual ~JobLink() = default;

  // On the loop: sends one write to agent `member`, a message and the frames after it. `expect`,
  // unless empty (a FREE, an UNLOAD), joins what the agent owes. If the job has failed or closed,
  // a round trip's reply learns so at once. `keep` holds the memory the pieces point at until the
  // write is done or given up.
  virtual void send(std::size_t member, Bytes owned,
                    rig::detail::PoolVector<Connection::Piece> pieces, std::optional<Expect> expect,
                    std::shared_ptr<const void> keep = {}) = 0;
  // The same for a submission, whose `link` is this link: no allocation, so a signal handler may
  // submit. With `alone` (its device has nothing else on its way), a small message goes from this
  // thread straight to the socket if the connection has nothing else to send (DirectLane).
  virtual void submit(Submission::Owned submission, bool alone) noexcept = 0;
  // Whether each agent's connection is sending, which a submit waits on.
  virtual const SendFlow& sending() const noexcept = 0;

  // Sends `message` (and `payload` after it in PAYLOAD frames) to agent `member` and waits for its
  // answer. Raises rig::Lost with the job's cause if the job fails first, or "the job has closed".
  // `keep` holds `payload`'s memory until the bytes are written, or the write given up. Any thread
  // but the loop's.
  std::shared_ptr<Reply> round_trip(std::size_t member, const Message& message, Expect::Kind kind,
                                    std::span<const std::uint8_t> payload = {},
                                    std::shared_ptr<const void> keep = {});
  // The two halves of a round trip, so that a caller may ask several agents at once: ask sends,
  // await waits for the answer (raising as round_trip does).
  std::shared_ptr<Reply> ask(std::size_t member, const Message& message, Expect::Kind kind,
                             std::span<const std::uint8_t> payload = {},
                             std::shared_ptr<const void> keep = {});
  static void await(Reply& reply);

  // Runs `call` on the loop with the protocol's side of the job's rails; dropped once the
  // protocol has finished, and in a child of fork. Any thread.
  virtual void with_rails(std::function<void(RailSide&)> call) = 0;

 private:
  friend struct Submission;
  // Loop thread: `submission` has come; what it carries is moved out.
  virtual void deliver(Submission& submission) noexcept = 0;
};

// A job's devices as its protocol sees them. Owner: the protocol. Threads: the loop thread.
class Proxies {
 public:
  virtual ~Proxies() = default;
  // The device of agent `member`'s device `id` (0: the machine's host), not yet registered.
  virtual std::shared_ptr<rig::detail::DeviceCore> make(std::size_t member, std::uint32_t id,
                                                        rig::detail::DeviceInfo info) = 0;
  // Makes `device` one of this process's devices; raises rig::Lost if the process takes no more.
  virtual void add(const std::shared_ptr<rig::detail::DeviceCore>& device) = 0;
  // Records that work on `from` may use memory of its agent's device `to`.
  virtual void add_reach(rig::detail::DeviceCore& from, std::uint32_t to) = 0;
  // The agent did `work`, up to `value` on `device`, and its copies' bytes are in place: the value
  // is published, and what the work counted returns to the device's flow control.
  virtual void reached(rig::detail::DeviceCore& device, std::uint64_t value,
                       const rig::detail::Work& work) noexcept = 0;
};

}  // namespace rig::remote
