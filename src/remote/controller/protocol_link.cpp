#include "remote/controller/protocol_link.hpp"

#include "remote/controller/post.hpp"
#include "remote/controller/protocol.hpp"

namespace rig::remote {

void ProtocolLink::close() {
  if (in_child()) return;
  post_function(reactor_, [this, keep = state_.shared_from_this()] {
    if (protocol_ == nullptr) return;
    protocol_->guarded([&] { protocol_->close(); });
  });
}

void ProtocolLink::fail(std::string cause) {
  if (in_child()) return;
  post_function(reactor_, [this, keep = state_.shared_from_this(), cause = std::move(cause)] {
    if (protocol_ == nullptr) return;
    protocol_->guarded([&] { protocol_->fail(cause); });
  });
}

void ProtocolLink::notice_losses() {
  if (in_child()) return;
  call_function(reactor_, [this] {
    if (protocol_ == nullptr) return;
    protocol_->guarded([&] { protocol_->notice_losses(); });
  });
}

void ProtocolLink::send(std::size_t member, Bytes owned,
                        rig::detail::PoolVector<Connection::Piece> pieces,
                        std::optional<Expect> expect, std::shared_ptr<const void> keep) {
  if (in_child()) {
    // The loop is the parent's: a round trip fails at once, anything else is dropped.
    if (expect && expect->reply) {
      expect->reply->failed = forked_cause;
      expect->reply->done.set();
    }
    return;
  }
  post_function(reactor_, [this, state = state_.shared_from_this(), member,
                           owned = std::move(owned), pieces = std::move(pieces),
                           expect = std::move(expect), keep = std::move(keep)]() mutable {
    if (protocol_ != nullptr) {
      protocol_->guarded([&] {
        protocol_->send(member, std::move(owned), std::move(pieces), std::move(expect),
                        std::move(keep));
      });
      return;
    }
    // The job has finished: a round trip learns why at once.
    if (expect && expect->reply) {
      const auto cause = state->outcome->cause();
      expect->reply->failed = cause ? *cause : "the job has closed";
      expect->reply->done.set();
    }
  });
}

void ProtocolLink::submit(Submission::Owned submission) noexcept {
  if (in_child()) return;  // dropped here: the child's devices of the job are lost already
  reactor_.post(submission.release());
}

void ProtocolLink::with_rails(std::function<void(RailSide&)> call) {
  if (in_child()) return;
  post_function(reactor_, [this, keep = state_.shared_from_this(), call = std::move(call)] {
    if (protocol_ == nullptr) return;
    protocol_->guarded([&] { call(*protocol_); });
  });
}

bool ProtocolLink::in_child() const noexcept {
  return state_.in_child.load(std::memory_order_acquire);
}

void ProtocolLink::deliver(Submission& s) noexcept {
  if (protocol_ == nullptr) return;
  protocol_->guarded([&] {
    protocol_->send(s.member, std::move(s.owned), std::move(s.pieces), std::move(s.expect),
                    std::move(s.keep));
  });
}

}  // namespace rig::remote
