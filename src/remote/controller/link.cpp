#include "remote/controller/link.hpp"

#include "core/signals.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {

void Submission::run(Reactor&) noexcept {
  const Owned self(this);
  link->deliver(*this);
}

std::shared_ptr<Reply> JobLink::round_trip(std::size_t member, const Message& message,
                                           Expect::Kind kind, std::span<const std::uint8_t> payload,
                                           std::shared_ptr<const void> keep) {
  auto reply = ask(member, message, kind, payload, std::move(keep));
  await(*reply);
  return reply;
}

std::shared_ptr<Reply> JobLink::ask(std::size_t member, const Message& message, Expect::Kind kind,
                                    std::span<const std::uint8_t> payload,
                                    std::shared_ptr<const void> keep) {
  auto reply = std::make_shared<Reply>();
  Bytes owned;
  encode(message, owned);
  rig::detail::PoolVector<Connection::Piece> pieces{{nullptr, 0, owned.size()}};
  add_bulk_frames(owned, pieces, Payload::type, payload);
  Expect e;
  e.kind = kind;
  e.reply = reply;
  send(member, std::move(owned), std::move(pieces), std::move(e), std::move(keep));
  return reply;
}

void JobLink::await(Reply& reply) {
  {
    // A wait for the agent, which may first finish earlier work: signal handlers may run in it.
    const rig::detail::SignalsOpen waiting;
    while (!reply.done.wait_for_ms(1000)) {
    }
  }
  if (!reply.answer) throw Lost(reply.failed);
}

}  // namespace rig::remote
