// ProtocolLink: the JobLink of a job whose protocol runs on a reactor (connect's): every call from
// another thread is posted to the loop, to the protocol while it runs, or after it has finished
// ends as a call to a finished job does.
#pragma once

#include "remote/controller/job_state.hpp"
#include "remote/controller/link.hpp"
#include "remote/io/reactor.hpp"

namespace rig::remote {

class ControllerProtocol;

// Owner: the job's state (JobState::link), which it refers back to. Threads: send, submit, close
// and sending from any thread; attach, detach and the posted calls on the loop thread, the only
// one that touches `protocol_`.
class ProtocolLink final : public JobLink {
 public:
  ProtocolLink(Reactor& reactor, JobState& state) : reactor_(reactor), state_(state) {}

  // Loop thread: calls go to `protocol` from now on, or (detach) to no protocol any more.
  void attach(ControllerProtocol& protocol) noexcept { protocol_ = &protocol; }
  void detach() noexcept { protocol_ = nullptr; }

  // Has the protocol send CLOSE to every agent (Job::close).
  void close();
  // Fails the job with `cause` (first cause wins), later, on the loop. Any thread.
  void fail(std::string cause);
  // Has the protocol look for a loss of its devices now, and returns once it has. Any thread but
  // the loop's.
  void notice_losses();

  void send(std::size_t member, Bytes owned, rig::detail::PoolVector<Connection::Piece> pieces,
            std::optional<Expect> expect, std::shared_ptr<const void> keep = {}) override;
  void submit(Submission::Owned submission, bool alone) noexcept override;
  const SendFlow& sending() const noexcept override { return state_.sending; }
  void with_rails(std::function<void(RailSide&)> call) override;

 private:
  void deliver(Submission& submission) noexcept override;
  // Writes `submission`'s message from this thread through its connection's lane, if the message
  // is small and the lane free; false (the submission still the caller's) if not.
  bool write_directly(Submission::Owned& submission) noexcept;
  // In a child of fork, whose copy of the loop never runs: calls end here.
  bool in_child() const noexcept;

  Reactor& reactor_;
  JobState& state_;
  ControllerProtocol* protocol_ = nullptr;  // null before the start and once finished
};

}  // namespace rig::remote
