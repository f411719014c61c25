#include "remote/job/job.hpp"

#include <cstdio>

#include "remote/wire/codec.hpp"

namespace rig::remote {

JobProtocol::JobProtocol(Reactor& reactor, const Timing& timing, Key key, InstanceId instance)
    : reactor_(reactor), timing_(timing), key_(std::move(key)), instance_(instance) {}

JobProtocol::~JobProtocol() = default;

Connection& JobProtocol::add_connection(std::string peer_name) {
  connections_.push_back(
      std::make_unique<Connection>(reactor_, *this, timing_, std::move(peer_name)));
  return *connections_.back();
}

void JobProtocol::fail(const std::string& cause) {
  if (!outcome_->fail(cause)) return;  // a later symptom of the first failure
  ended_ = true;
  on_job_failed(cause);
  const Message abort = Abort{clamp_reason(cause)};
  for (auto& c : connections_) c->end(abort);
  if (connections_.empty()) on_finished();
}

void JobProtocol::on_message(Connection& c, Message&& m) noexcept {
  if (const auto* a = std::get_if<Abort>(&m)) {
    fail(c.peer_name() + " aborted: " + a->reason);
    return;
  }
  on_job_message(c, std::move(m));
}

void JobProtocol::on_job_bulk(Connection& c, std::uint8_t type,
                              std::span<const std::uint8_t>) noexcept {
  fail(c.peer_name() + ": malformed message: " + std::string(message_name(type)) +
       " where none was expected");
}

void JobProtocol::on_failed(Connection&, const std::string& cause) noexcept {
  if (ended_ && !has_failed()) return;  // closed in order: a connection's end is expected now
  fail(cause);
}

void JobProtocol::on_closed(Connection& c) noexcept {
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() == &c) {
      connections_.erase(it);
      break;
    }
  }
  if (finished()) on_finished();
}

}  // namespace rig::remote
