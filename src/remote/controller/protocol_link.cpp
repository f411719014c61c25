#include "remote/controller/protocol_link.hpp"

#include <array>
#include <cstring>
#include <span>

#include "remote/limits.hpp"

#include "remote/controller/post.hpp"
#include "remote/controller/protocol.hpp"
#include "remote/io/connection.hpp"

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

void ProtocolLink::submit(Submission::Owned submission, bool alone) noexcept {
  if (in_child()) return;  // dropped here: the child's devices of the job are lost already
  if (alone && reactor_.nothing_posted() && write_directly(submission)) return;
  reactor_.post(submission.release());
}

bool ProtocolLink::write_directly(Submission::Owned& submission) noexcept {
  // The message is copied here first, so that the protocol may take (and free) the submission as
  // soon as it is in the state's `written`, which it is before the first byte leaves: the loop
  // then knows what the agent owes before the answer can arrive (ControllerProtocol::take_written,
  // at every answer and before every message of its own).
  std::array<std::uint8_t, direct_write_bytes_max> message;
  std::size_t bytes = 0;
  const auto add = [&](const std::uint8_t* from, std::size_t n) {
    if (n > message.size() - bytes) return false;
    std::memcpy(message.data() + bytes, from, n);
    bytes += n;
    return true;
  };
  const Submission& s = *submission;
  if (s.pieces.empty()) {
    if (!add(s.owned.data(), s.owned.size())) return false;
  } else {
    for (const Connection::Piece& p : s.pieces) {
      if (!add(p.external != nullptr ? p.external : s.owned.data() + p.offset, p.bytes)) {
        return false;
      }
    }
  }
  const std::size_t member = s.member;
  struct Before {
    MpscQueue* written;
    Submission* submission;
  } before{&state_.written, submission.get()};
  const auto out = state_.lanes[member]->try_write(
      {message.data(), bytes},
      [](void* context) {
        auto* b = static_cast<Before*>(context);
        b->written->push(b->submission);
      },
      &before);
  if (out.wrote == DirectLane::Wrote::none) return false;
  (void)submission.release();  // in the state's `written`, from before()
  if (out.wrote == DirectLane::Wrote::all) return true;
  // The kernel took part of it: the loop writes the rest before anything else. Should the post
  // find no memory, the half-written frame and the writes held behind it leave the agent without
  // heartbeats, which it reports as this link gone silent: named, and within the silence bound.
  (void)post_rest(reactor_, state_.lanes[member],
                  std::span<const std::uint8_t>(message).subspan(out.written, bytes - out.written));
  return true;
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
