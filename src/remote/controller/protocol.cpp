#include "remote/controller/protocol.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <variant>

#include "remote/io/guard.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {

ControllerProtocol::ControllerProtocol(Reactor& reactor, const Timing& timing, Key key,
                                       InstanceId instance, JobId id,
                                       std::shared_ptr<JobState> state, std::vector<Member> members,
                                       std::unique_ptr<Proxies> proxies, Dialer& dialer,
                                       Finished finished)
    : JobProtocol(reactor, timing, std::move(key), instance),
      state_(std::move(state)),
      members_(std::move(members)),
      proxies_(std::move(proxies)),
      dialer_(dialer),
      finished_(std::move(finished)),
      id_(id),
      own_rails_(reactor,
                 Rails::Events{nullptr,
                               [this](HeldRail& rail, std::uint64_t round) {
                                 if (auto it = rails_.find(rail.id); it != rails_.end())
                                   rail_arrived(it->second, round);
                               },
                               nullptr, [this](const std::string& cause) { fail(cause); }}) {
  ticker_ = reactor_.add_ticker([this](std::int64_t now) { guarded([&] { tick(now); }); });
}

ControllerProtocol::~ControllerProtocol() {
  reactor_.remove_ticker(ticker_);
  // What no answer took (the job ended first): each is a block of the pool.
  while (QueueNode* node = state_->written.pop_pushed()) {
    Submission::Owned(static_cast<Submission*>(node));
  }
}

void ControllerProtocol::start() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    auto transport = dialer_.dial(reactor_, timing_, m.name, m.dial_text, &m.address);
    // Over TCP the address is resolved already, so this cannot fail; a simulation's may.
    if (!transport) return fail(m.name + ": " + transport.error());
    Connection& c = add_connection(m.name);
    c.tag = i;
    c.set_direct_lane(state_->lanes[i]);
    c.set_sending_watch(
        [flow = &state_->sending, i](bool sending) { flow->set_sending(i, sending); });
    m.connection = &c;
    DialerConfig config{Role::controller, "controller", id_, m.name, instance_};
    c.dial(std::move(*transport), Handshake::dialer(key_, std::move(config)));
  }
}

void ControllerProtocol::on_refused(Connection& c, const std::string& why) noexcept {
  guarded([&] {
    // The agent drops a second connection of its job's controller: that is the listing's fault.
    if (!listed_twice(c)) fail(c.peer_name() + ": " + why);
  });
}

bool ControllerProtocol::listed_twice(const Connection& c) {
  // Only a start can find an agent listed twice: once every agent has proven the key (JOIN has
  // gone), or once the job has failed, a member's connection may have closed, and its pointer is
  // then stale (in a close, the connections of the agents that answered CLOSED go first).
  if (has_failed() || closing_ || proven_ >= members_.size() || c.tag >= members_.size()) {
    return false;
  }
  const auto mine = c.greeting_instance();
  if (!mine) return false;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const Connection* other = members_[i].connection;
    if (i == c.tag || other == nullptr || other->greeting_instance() != mine) continue;
    const Member& first = members_[std::min<std::size_t>(i, c.tag)];
    const Member& second = members_[std::max<std::size_t>(i, c.tag)];
    fail(second.name + ": listed twice: the same agent as " + first.name);
    return true;
  }
  return false;
}

// While the job closes, a connection's end is expected only once its agent has answered CLOSE with
// CLOSED; before that it fails the job as at any other time (a job that fails during its close ends
// as a failed job does), rather than letting close report an agent that never let go as closed.
void ControllerProtocol::on_failed(Connection& c, const std::string& cause) noexcept {
  if (closing_ && c.tag < members_.size() && members_[c.tag].closed) return;
  guarded([&] {
    if (!listed_twice(c)) fail(cause);
  });
}

void ControllerProtocol::on_proven(Connection& c) noexcept {
  guarded([&] {
    if (has_failed() || listed_twice(c)) return;
    if (++proven_ < members_.size()) return;
    // Every agent is in: tell each who the others are, so that they connect to each other.
    Join join;
    for (const Member& m : members_) {
      join.names.push_back(m.name);
      join.addresses.push_back(m.dial_text);
    }
    for (Member& m : members_) {
      join.you = m.name;
      m.connection->send(join);
    }
    join_sent_ms_ = reactor_.now_ms();
  });
}

void ControllerProtocol::on_job_message(Connection& c, Message&& m) noexcept {
  guarded([&] { message(c, std::move(m)); });
}

void ControllerProtocol::message(Connection& c, Message&& m) {
  Member& member = members_[c.tag];
  if (auto* ready = std::get_if<Ready>(&m)) {
    if (member.ready) return fail(c.peer_name() + ": malformed message: READY twice");
    member.ready = true;
    member.host_arch = ready->host_arch;
    member.host_budget = ready->host_budget;
    if (++ready_ == members_.size()) started();
    return;
  }
  if (!member.host && !std::holds_alternative<Closed>(m)) {
    const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
    return fail(malformed(c) + std::string(name) + " before READY");
  }
  if (std::holds_alternative<Reached>(m))
    return answer(c, member, Expect::Kind::reached, std::move(m));
  if (std::holds_alternative<Opened>(m))
    return answer(c, member, Expect::Kind::opened, std::move(m));
  if (std::holds_alternative<Made>(m)) return answer(c, member, Expect::Kind::made, std::move(m));
  if (std::holds_alternative<Loaded>(m))
    return answer(c, member, Expect::Kind::loaded, std::move(m));
  if (std::holds_alternative<RailMade>(m)) {
    return answer(c, member, Expect::Kind::railed, std::move(m));
  }
  if (const auto* count = std::get_if<RailCount>(&m)) return rail_count(c, *count);
  if (Rails::handles(m)) return own_rails_.on_message(c, m);
  if (std::holds_alternative<Closed>(m)) {
    // The agent has let go of the job and stopped listening; now both ends close the connection.
    member.closed = true;
    c.end(std::nullopt);
    return;
  }
  const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
  fail(malformed(c) + std::string(name) + " is not one an agent sends");
}

std::shared_ptr<rig::detail::DeviceCore> ControllerProtocol::make_device(
    std::size_t member, std::uint32_t id, rig::detail::DeviceInfo info) {
  auto core = proxies_->make(member, id, std::move(info));
  if (core) core->timeline().share_cause(JobOutcome::shared(outcome()));
  return core;
}

void ControllerProtocol::started() {
  std::vector<Device> hosts;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    auto core = make_device(
        i, 0, rig::detail::DeviceInfo{Kind::cpu, "CPU@" + m.name, m.host_arch, m.host_budget});
    m.host = core;
    m.devices[0] = core;
    proxies_->add(core);  // a throw (rig::Lost) fails the job with its text
    hosts.push_back(Device(core));
  }
  {
    std::lock_guard lock(state_->mu);
    state_->hosts = std::move(hosts);
  }
  state_->report.started();
  state_->started.set();
}

void ControllerProtocol::send(std::size_t index, Bytes owned,
                              rig::detail::PoolVector<Connection::Piece> pieces,
                              std::optional<Expect> expect, std::shared_ptr<const void> keep) {
  Member* m = owed(index, std::move(expect));
  if (m == nullptr) return;
  if (!keep) {
    // A message of its own bytes only (a small SUBMIT, an ALLOC): the ones the loop takes from
    // the queue in one turn go in one write (send_soon), as pipelined calls come.
    return m->connection->send_soon(std::move(owned), pieces);
  }
  m->connection->send_pieces(std::move(owned), pieces, [keep = std::move(keep)] {});
}

Member* ControllerProtocol::owed(std::size_t index, std::optional<Expect> expect) {
  // Submitters' writes on the member's connection stop before what its agent owes is looked at:
  // one that wrote before has put its submission in `written`, taken here ahead of this message,
  // and one after finds the lane taken and posts behind it. Without this, a write between the
  // look and the loop's own write put its answer first on the wire and last in the queue.
  // (Only while the job may still send: a failed job's connections may be gone.)
  if (!has_failed() && !closing_ && index < members_.size() &&
      members_[index].connection != nullptr &&
      members_[index].connection->state() == Connection::State::open) {
    members_[index].connection->hold_lane();
  }
  take_written();
  return owed_now(index, std::move(expect));
}

Member* ControllerProtocol::owed_now(std::size_t index, std::optional<Expect> expect) {
  Member* m = index < members_.size() ? &members_[index] : nullptr;
  if (has_failed() || closing_ || m == nullptr || m->connection == nullptr ||
      m->connection->state() != Connection::State::open) {
    if (expect && expect->reply) {
      const auto cause = outcome()->cause();
      expect->reply->failed = cause ? *cause : "the job has closed";
      expect->reply->done.set();
    }
    return nullptr;
  }
  if (expect) {
    if (expect->kind == Expect::Kind::reached) {
      auto device = m->devices.find(expect->device_id);
      if (device == m->devices.end()) return nullptr;  // not a device of this job: cannot happen
      expect->device = device->second;
    }
    m->expects.push_back(std::move(*expect));
  }
  return m;
}

void ControllerProtocol::take_written() {
  // What a submitter wrote itself (DirectLane) is owed from before its first byte left, and must
  // join what its agent owes ahead of anything the loop sends later and of the answer.
  // Every node pushed before the answer's message left is taken, even while a later push (another
  // thread's write, to this agent or another) is half done behind it: pop() would stop there.
  while (QueueNode* node = state_->written.pop_pushed()) {
    const Submission::Owned s(static_cast<Submission*>(node));
    owed_now(s->member, std::move(s->expect));
  }
}

void ControllerProtocol::answer(Connection& c, Member& member, Expect::Kind kind, Message&& m) {
  take_written();
  if (member.expects.empty() || member.expects.front().kind != kind) {
    return fail(malformed(c) + expect_name(kind) + " where " +
                (member.expects.empty() ? std::string("nothing")
                                        : std::string(expect_name(member.expects.front().kind))) +
                " was due");
  }
  Expect& e = member.expects.front();
  if (kind == Expect::Kind::reached) return reached(c, member, std::get<Reached>(m));
  std::vector<Device> devices;
  if (kind == Expect::Kind::opened) devices = opened(member, c.tag, std::get<Opened>(m));
  if (has_failed()) return;
  std::shared_ptr<Reply> reply = std::move(e.reply);
  reply->devices = std::move(devices);
  member.expects.pop_front();
  reply->answer = std::move(m);
  reply->done.set();
}

std::string ControllerProtocol::malformed(const Connection& c) {
  return c.peer_name() + ": malformed message: ";
}

void ControllerProtocol::reached(const Connection& c, Member& member, const Reached& r) {
  const auto due = [](const Expect& e) {
    return "device " + std::to_string(e.device_id) + " value " + std::to_string(e.value);
  };
  // A timeline only grows: REACHED of a value answers every SUBMIT of its device due before the
  // one of that value (the agent sends one for a burst), as long as nothing else is due between.
  // All of it is checked before any value is stored, so a bad one stores none.
  std::size_t last = 0;
  for (;; ++last) {
    const Expect* e = last < member.expects.size() ? &member.expects[last] : nullptr;
    const bool in_run = e != nullptr && e->kind == Expect::Kind::reached &&
                        e->device_id == r.device && e->value <= r.value;
    if (!in_run) {
      std::string then;
      if (last > 0) {
        then = ", then " + (e == nullptr                       ? std::string("nothing")
                            : e->kind == Expect::Kind::reached ? due(*e)
                                                               : std::string(expect_name(e->kind)));
      }
      return fail(malformed(c) + "REACHED device " + std::to_string(r.device) + " value " +
                  std::to_string(r.value) + " where " + due(member.expects.front()) + " was due" +
                  then);
    }
    if (e->copy_index < e->copies.size()) {
      return fail(malformed(c) + "REACHED value " + std::to_string(r.value) +
                  " before the bytes of " +
                  (e->value == r.value ? std::string("its copies")
                                       : "the copies of value " + std::to_string(e->value)) +
                  " into this process's memory");
    }
    if (e->value == r.value) break;
  }
  for (std::size_t i = 0; i <= last; ++i) {
    Expect& e = member.expects.front();
    // The copies' bytes are in place: the value may now say so (release order, in publish).
    proxies_->reached(*e.device, e.value, e.work);
    member.expects.pop_front();  // drops the work, and with it the last use of its buffers
  }
}

std::vector<Device> ControllerProtocol::opened(Member& member, std::size_t index, const Opened& o) {
  std::vector<Device> out;
  if (!o.why.empty()) return out;
  // Proxies of devices seen for the first time; a device opened before keeps its proxy.
  for (const WireDevice& d : o.devices) {
    if (d.id == 0) {
      fail(member.name + ": malformed message: OPENED device id 0");
      return {};
    }
    if (auto known = member.devices.find(d.id); known != member.devices.end()) {
      out.push_back(Device(known->second));
      continue;
    }
    const auto kind = kind_from_name(d.name.substr(0, d.name.find(':')));
    if (!kind) {
      fail(member.name + ": malformed message: OPENED device '" + d.name + "' of no known kind");
      return {};
    }
    auto core = make_device(
        index, d.id, rig::detail::DeviceInfo{*kind, d.name + "@" + member.name, d.arch, d.budget});
    proxies_->add(core);  // a throw (rig::Lost) fails the job with its text
    member.devices[d.id] = core;
    out.push_back(Device(core));
  }
  for (const WireReach& r : o.reaches) {
    auto from = member.devices.find(r.from);
    if (from == member.devices.end() || member.devices.count(r.to) == 0) {
      fail(member.name + ": malformed message: OPENED reach " + std::to_string(r.from) + " to " +
           std::to_string(r.to) + " names a device it did not open");
      return {};
    }
    proxies_->add_reach(*from->second, r.to);
  }
  return out;
}

void ControllerProtocol::on_job_bulk(Connection& c, std::uint8_t type,
                                     std::span<const std::uint8_t> bytes) noexcept {
  guarded([&] {
    if (type == RailData::type) return own_rails_.on_data(c, bytes.size(), bytes.data());
    receive_data(c, type, bytes.size(), bytes.data());
  });
}

std::span<std::uint8_t> ControllerProtocol::bulk_sink(Connection& c, std::uint8_t type,
                                                      std::size_t bytes) noexcept {
  if (type == RailData::type && !has_failed()) {
    std::span<std::uint8_t> to;
    guarded([&] { to = own_rails_.sink(c, bytes); });
    return to;
  }
  if (type != Data::type || has_failed() || c.tag >= members_.size()) return {};
  Member& member = members_[c.tag];
  guarded([&] { take_written(); });
  if (has_failed()) return {};
  if (member.expects.empty() || member.expects.front().kind != Expect::Kind::reached) return {};
  Expect& e = member.expects.front();
  if (e.copy_index >= e.copies.size()) return {};
  const CopyBack& to = e.copies[e.copy_index];
  if (to.bytes - e.copy_done < bytes) return {};  // runs across copies: through on_job_bulk
  return {reinterpret_cast<std::uint8_t*>(to.at) + e.copy_done, bytes};
}

void ControllerProtocol::on_bulk_placed(Connection& c, std::uint8_t type,
                                        std::size_t bytes) noexcept {
  guarded([&] {
    if (type == RailData::type) return own_rails_.on_data(c, bytes, nullptr);
    receive_data(c, type, bytes, nullptr);
  });
}

void ControllerProtocol::receive_data(Connection& c, std::uint8_t type, std::size_t bytes,
                                      const std::uint8_t* from) {
  Member& member = members_[c.tag];
  if (type != Data::type) return fail(malformed(c) + "PAYLOAD is not one an agent sends");
  take_written();
  if (member.expects.empty() || member.expects.front().kind != Expect::Kind::reached) {
    return fail(malformed(c) + "DATA where no copy into this process's memory was due");
  }
  Expect& e = member.expects.front();
  // The bytes go where the copy asked, as they come; they may run across copies of the work.
  while (bytes > 0) {
    if (e.copy_index >= e.copies.size()) {
      return fail(malformed(c) + "DATA beyond the bytes of the copies of value " +
                  std::to_string(e.value));
    }
    CopyBack& to = e.copies[e.copy_index];
    const std::size_t n = std::min(bytes, to.bytes - e.copy_done);
    if (from != nullptr) {
      std::memcpy(to.at + e.copy_done, from, n);
      from += n;
    }
    bytes -= n;
    e.copy_done += n;
    if (e.copy_done == to.bytes) {
      ++e.copy_index;
      e.copy_done = 0;
    }
  }
}

void ControllerProtocol::close() {
  if (has_failed() || closing_) return;
  closing_ = true;
  mark_ended();
  for (Member& m : members_) m.connection->send(Close{});
}

void ControllerProtocol::tick(std::int64_t now) {
  if (has_failed()) return;
  // A backstop: an agent that got its JOIN answers READY or, failing to connect to the others,
  // aborts naming both machines, before this. So the agent said nothing: the JOIN, or what it
  // answered, did not arrive (a link that drops, a process stopped since).
  const std::int64_t answer_ms = timing_.handshake_timeout_ms + timing_.join_verdict_ms;
  if (join_sent_ms_ != 0 && ready_ < members_.size() && now - join_sent_ms_ >= answer_ms) {
    for (const Member& m : members_) {
      if (!m.ready)
        return fail(m.name + ": did not answer the JOIN within " + seconds_text(answer_ms));
    }
  }
  notice_losses();
}

void ControllerProtocol::notice_losses() {
  if (has_failed()) return;
  // A host or proxy lost on this process other than by a close (rig::fail, say) fails the job.
  for (const Member& m : members_) {
    for (const auto& [id, device] : m.devices) {
      if (device->timeline().lost() && !device->closed()) return fail(device->timeline().why());
    }
  }
}

void ControllerProtocol::on_job_failed(const std::string& cause) noexcept {
  for (Member& m : members_) {
    for (auto& [id, device] : m.devices) device->lose(cause);
    // Every caller waiting for an answer wakes with the cause; the work held here lets go.
    for (Expect& e : m.expects) {
      if (e.reply) {
        e.reply->failed = cause;
        e.reply->done.set();
      }
    }
    m.expects.clear();
  }
  // Every count of every rail is raised, so that no waiter hangs; go() finds the rail lost.
  own_rails_.raise_all();
  for (auto& [id, rail] : rails_) {
    rail.plan.counts->raise();
    rail.plan.device->lose(cause);
    rail.rounds.clear();
  }
  // Submits waiting for a connection to finish sending wake now, to find their devices lost.
  state_->sending.wake_all();
  state_->report.failed(cause);
}

Connection* ControllerProtocol::member_connection(std::size_t index) {
  if (index >= members_.size()) return nullptr;
  Connection* c = members_[index].connection;
  return c != nullptr && c->state() == Connection::State::open ? c : nullptr;
}

void ControllerProtocol::add_rail(RailPlan plan, std::shared_ptr<Reply> source_reply,
                                  std::shared_ptr<Reply> destination_reply) {
  const auto refuse = [&](const std::string& why) {
    for (const auto& r : {source_reply, destination_reply}) {
      if (!r) continue;
      r->failed = why;
      r->done.set();
    }
  };
  if (has_failed() || closing_) {
    const auto cause = outcome()->cause();
    return refuse(cause ? *cause : "the job has closed");
  }
  if (has_failed()) plan.counts->raise();
  const bool own_source = plan.source == RailPlan::controller;
  const bool own_destination = plan.destination == RailPlan::controller;
  if (own_source || own_destination) {
    Connection* link = member_connection(own_source ? plan.destination : plan.source);
    if (link == nullptr) return refuse("the job has closed");
    if (auto why =
            own_rails_.add(plan.id, own_source, *link, plan.own_parts, plan.keep, plan.counts)) {
      return refuse(*why);
    }
  }
  const auto tell = [&](std::size_t member, std::uint8_t role, std::size_t other,
                        const std::vector<WireRailPart>& parts, std::shared_ptr<Reply> reply) {
    RailMake m{plan.id, role, other == RailPlan::controller ? "" : members_[other].name, parts};
    Bytes owned;
    encode(m, owned);
    rig::detail::PoolVector<Connection::Piece> pieces{{nullptr, 0, owned.size()}};
    Expect e{};
    e.kind = Expect::Kind::railed;
    e.reply = std::move(reply);
    send(member, std::move(owned), std::move(pieces), std::move(e));
  };
  if (!own_source) {
    tell(plan.source, RailMake::source, plan.destination, plan.source_parts, source_reply);
  }
  if (!own_destination) {
    tell(plan.destination, RailMake::destination, plan.source, plan.destination_parts,
         destination_reply);
  }
  rails_made_ = std::max(rails_made_, plan.id);
  const std::uint32_t id = plan.id;
  rails_.emplace(id, KeptRail{std::move(plan), {}});
}

void ControllerProtocol::go_rail(std::uint32_t id, std::uint64_t round, rig::detail::Work work,
                                 bool ahead) {
  auto it = rails_.find(id);
  if (it == rails_.end() || has_failed() || closing_) return;
  KeptRail& rail = it->second;
  rail.rounds.emplace_back(round, std::move(work));
  const RailPlan& plan = rail.plan;
  if (plan.source == RailPlan::controller) {
    // go() waited for all the work the round follows (RailDriver::ready), and work after it on the
    // destination waits here for its arrival: the chunks go at once, and say whose round it is.
    if (HeldRail* held = own_rails_.find(id)) {
      held->driven = round;
      own_rails_.go(*held, round, false, "controller");
    }
    return;
  }
  // A burst of go() calls the loop took in one turn goes in one write per connection.
  const auto to_member = [&](std::size_t member, const Message& m) {
    if (Connection* c = member_connection(member)) c->send_soon(m);
  };
  if (plan.destination != RailPlan::controller) {
    if (ahead) {
      // Nothing there for the round to follow: the destination needs to know of it only before
      // the controller's next message to it, which may use the round's memory.
      if (Connection* c = member_connection(plan.destination)) c->send_later(RailAwait{id, round});
    } else {
      // First, so that its RAIL_READY is on its way as the source reaches the round.
      to_member(plan.destination, RailExpect{id, round});
    }
  }
  // A destination that is this process is ready: the round's dependencies are done (go()).
  const bool at_once = ahead || plan.destination == RailPlan::controller;
  to_member(plan.source, RailGo{id, round, static_cast<std::uint8_t>(at_once ? 1 : 0)});
}

void ControllerProtocol::end_rail(std::uint32_t id) {
  auto it = rails_.find(id);
  if (it == rails_.end()) return;
  const RailPlan plan = it->second.plan;
  rails_.erase(it);
  if (has_failed()) return;
  if (plan.source == RailPlan::controller) {
    if (HeldRail* held = own_rails_.find(id)) own_rails_.end(*held);
    return;
  }
  if (Connection* c = member_connection(plan.source)) c->send(RailEnd{id});
}

void ControllerProtocol::rail_count(Connection& c, const RailCount& m) {
  auto it = rails_.find(m.rail);
  if (it == rails_.end()) {
    if (m.rail != 0 && m.rail <= rails_made_) return;  // ended here since: its counts are no news
    return fail(c.peer_name() + ": malformed message: RAIL_COUNT names rail " +
                std::to_string(m.rail) + ", which the job does not hold");
  }
  KeptRail& rail = it->second;
  const std::size_t from = m.which == RailCount::sent ? rail.plan.source : rail.plan.destination;
  if (m.which > RailCount::arrived || from == RailPlan::controller || c.tag != from) {
    return fail(c.peer_name() + ": malformed message: RAIL_COUNT " + std::to_string(m.which) +
                " of rail " + std::to_string(m.rail) + " from an agent that does not keep it");
  }
  if (m.which == RailCount::sent) {
    rail.plan.counts->sent().publish(m.value);
    return;
  }
  rail.plan.counts->arrive(m.value);
  rail_arrived(rail, m.value);
}

void ControllerProtocol::rail_arrived(KeptRail& rail, std::uint64_t value) {
  // The rail's device publishes the controller's rounds that have arrived (release order), so
  // that work ordered after a round follows it; what each counted returns to its flow control.
  while (!rail.rounds.empty() && rail.rounds.front().first <= value) {
    rail.plan.round_arrived(rail.rounds.front().second);
    rail.rounds.pop_front();
  }
  rail.plan.device->timeline().publish(value);
}

void ControllerProtocol::on_finished() noexcept {
  state_->finished.set();
  finished_(*this);
}

}  // namespace rig::remote
