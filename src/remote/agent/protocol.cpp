#include "remote/agent/protocol.hpp"

#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstring>
#include <string_view>
#include <variant>

#include "remote/io/address.hpp"
#include "remote/io/counters.hpp"
#include "remote/io/tcp_transport.hpp"
#include "remote/wire/printable.hpp"

namespace rig::remote {

std::size_t strangers_cap(std::uint64_t descriptors_max) {
  // No limit (RLIM_INFINITY) or a huge one: strangers_max; the product below cannot overflow.
  const std::uint64_t limit = std::min<std::uint64_t>(descriptors_max, std::uint64_t{1} << 40);
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(
      limit * strangers_descriptor_percent / 100, strangers_min, strangers_max));
}

std::size_t strangers_cap() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return strangers_max;
  return strangers_cap(r.rlim_cur);
}

AgentProtocol::AgentProtocol(Reactor& reactor, const Timing& timing, const Key& key, Setup setup)
    : JobProtocol(reactor, timing, key, setup.instance),
      setup_(std::move(setup)),
      strangers_max_(setup_.strangers_max != 0 ? setup_.strangers_max : strangers_cap()),
      work_(
          reactor, setup_.kinds, [this](const std::string& cause) { fail(cause); },
          setup_.program_signals) {
  ticker_ = reactor_.add_ticker([this](std::int64_t now) { step([&] { tick(now); }); });
  // A rail's other end, when it is another agent: its proven connection, by the name JOIN gave.
  work_.rails().set_links([this](const std::string& name) -> Connection* {
    Connection* found = nullptr;
    each_connection([&](Connection& c) {
      if (c.tag == agent_tag && c.state() == Connection::State::open && c.peer().name == name) {
        found = &c;
      }
    });
    return found;
  });
}

void AgentProtocol::threw(const std::string& why) noexcept {
  if (!thrown_) thrown_ = std::current_exception();
  fail(why);
}

AgentProtocol::~AgentProtocol() {
  reactor_.remove_ticker(ticker_);
}

int AgentProtocol::listen(int listen_fd, std::string where) {
  where_ = std::move(where);
  listener_.emplace(reactor_.loop(), listen_fd,
                    Listener::Events{[this](int fd) { on_socket(fd); },
                                     [this](int err) { return make_room(err); },
                                     [this](int err) { on_short_of_resources(err); },
                                     [this](const std::string& why) { on_accept_failed(why); }});
  return listener_->start();
}

void AgentProtocol::log(const std::string& line) const {
  if (setup_.log) setup_.log(line);
}

void AgentProtocol::stop_listening() {
  accepting_ = false;
  if (listener_) listener_->stop();
  // A controller that came as the job ends hears so, not a connection cut mid-handshake.
  each_connection([](Connection& c) {
    if (c.tag == stranger && (c.state() == Connection::State::handshaking ||
                              c.state() == Connection::State::connecting)) {
      c.turn_away();
    }
  });
}

void AgentProtocol::shut() {
  if (shut_) return;
  shut_ = true;
  work_.shut();
  stop_listening();
  reactor_.stop();
}

void AgentProtocol::on_socket(int fd) noexcept {
  step([&] { accept(TcpTransport::adopt(reactor_.loop(), fd, timing_.tcp_user_timeout_ms)); });
}

void AgentProtocol::accept(std::unique_ptr<Transport> transport) {
  // The newest stranger is the likeliest to hold the key: one that does proves it within a round
  // trip, so the oldest has had the longest to do so.
  while (strangers_.size() >= strangers_max_ &&
         drop_oldest_stranger("at the cap of " + std::to_string(strangers_max_))) {
  }
  Connection& c = add_connection("a connection");
  c.tag = stranger;
  strangers_.push_back(&c);
  const ListenerConfig config{instance_};
  c.adopt(std::move(transport), Handshake::listener(key_, config));
}

bool AgentProtocol::make_room(int err) noexcept {
  bool made = false;
  step([&] { made = drop_oldest_stranger(std::string("accept: ") + std::strerror(err)); });
  return made;
}

bool AgentProtocol::drop_oldest_stranger(const std::string& why) {
  while (!strangers_.empty()) {
    Connection* oldest = strangers_.front();
    strangers_.pop_front();
    oldest->tag = former_stranger;
    // One timed out or refused is closing already: its descriptor is back, so it makes no room.
    if (oldest->state() == Connection::State::closing ||
        oldest->state() == Connection::State::closed) {
      continue;
    }
    oldest->close_now();  // the descriptor is closed at once; the memory when the close is done
    if (ConnectionCounters* c = connection_counters()) {
      c->connections_refused.fetch_add(1, std::memory_order_relaxed);
    }
    if (dropped_++ == 0) {
      dropped_logged_ = 1;
      dropped_logged_ms_ = reactor_.now_ms();
      log("dropped the oldest connection that had not proven the key, to make room (" + why +
          "); more such drops are counted every " + seconds_text(strangers_log_interval_ms));
    }
    return true;
  }
  return false;
}

void AgentProtocol::forget_stranger(Connection& c) {
  if (c.tag != stranger) return;
  // Strangers leave mostly in the order they came (timed out or dropped): found near the front.
  if (auto it = std::find(strangers_.begin(), strangers_.end(), &c); it != strangers_.end()) {
    strangers_.erase(it);
  }
}

void AgentProtocol::on_closed(Connection& c) noexcept {
  if (c.tag == stranger || c.tag == former_stranger) ++gone_since_trim_;
  forget_stranger(c);
  JobProtocol::on_closed(c);  // destroys c
}

void AgentProtocol::strangers_tick(std::int64_t now) {
  if (dropped_ > dropped_logged_ && now - dropped_logged_ms_ >= strangers_log_interval_ms) {
    log("dropped " + std::to_string(dropped_ - dropped_logged_) +
        " more connections that had not proven the key, to make room, in " +
        seconds_text(now - dropped_logged_ms_));
    dropped_logged_ = dropped_;
    dropped_logged_ms_ = now;
  }
  // Many have gone, or all that came since the last time.
  const bool many = gone_since_trim_ >= strangers_trim_count;
  const bool all = gone_since_trim_ > 0 && strangers_.empty();
  if ((many || all) && now - trimmed_ms_ >= strangers_trim_interval_ms) {
    // What thousands of strangers freed lies in small pieces all over the heap, which free() gives
    // back to the system only from its top.
#if defined(__GLIBC__)
    ::malloc_trim(0);
#endif
    gone_since_trim_ = 0;
    trimmed_ms_ = now;
  }
}

// The connection waits in the kernel's backlog meanwhile; the operator hears of it once.
void AgentProtocol::on_short_of_resources(int err) noexcept {
  step([&] { shortage(err); });
}

void AgentProtocol::shortage(int err) {
  log("cannot accept a connection at " + where_ + ": " + std::strerror(err) +
      ": accepting again in " + seconds_text(static_cast<std::int64_t>(accept_retry_ms)));
}

// serve ends with this cause, and so does a job it serves.
void AgentProtocol::on_accept_failed(const std::string& why) noexcept {
  step([&] { fail("cannot accept a connection at " + where_ + ": " + why); });
}

void AgentProtocol::on_proven(Connection& c) noexcept {
  step([&] { proven(c); });
}

void AgentProtocol::proven(Connection& c) {
  forget_stranger(c);
  c.tag = former_stranger;  // until the role below says what it is
  // Host code writes its small rail rounds over the job's connections itself (Rails::write_round),
  // and their counts wait in the lane for the next write. Only proven ones get one: a stranger's
  // memory is capped (strangers_max).
  c.set_direct_lane(std::make_shared<DirectLane>());
  const Peer& peer = c.peer();
  if (peer.role == Role::controller) {
    if (controller_ != nullptr || ended()) {
      c.close_now();  // a second connection from the job's controller: nothing to say to it
      return;
    }
    job_ = peer.job;
    controller_ = &c;
    my_name_ = peer.our_name;
    c.set_peer_name("controller");
    c.tag = controller_tag;
    work_.set_controller(&c);
    controller_since_ms_ = reactor_.now_ms();
    if (setup_.started) setup_.started(c.peer_address());
    log("started by the controller at " + c.peer_address() + ", which names this agent " +
        printable(my_name_));
    return;
  }
  // Another agent of the job, dialed or accepted: its name, as it gives it, is kept for matching
  // and escaped for the causes that name its connection.
  c.set_peer_name(printable(peer.name));
  c.tag = agent_tag;
  ++links_proven_;
  linked_.push_back(peer.name);
  maybe_ready();
}

void AgentProtocol::on_refused(Connection& c, const std::string& why) noexcept {
  // One of our own dials to another agent of the job: the job cannot form.
  if (c.tag == dial_tag) step([&] { fail(c.peer_name() + ": " + why); });
  // A stranger (wrong key, another job, silence): dropped; the agent goes on serving.
}

void AgentProtocol::on_job_message(Connection& c, Message&& m) noexcept {
  step([&] { message(c, std::move(m)); });
}

void AgentProtocol::message(Connection& c, Message&& m) {
  if (c.tag == controller_tag) return from_controller(std::move(m));
  if (Rails::handles(m) && ready_sent_) return work_.rails().message(c, m);
  if (std::holds_alternative<Close>(m)) {
    // That agent is ending the job in order: its connection's end is no failure.
    c.end(std::nullopt);
    return;
  }
  const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
  fail(c.peer_name() + ": malformed message: " + std::string(name) +
       " is not one an agent sends to another");
}

void AgentProtocol::on_job_bulk(Connection& c, std::uint8_t type,
                                std::span<const std::uint8_t> bytes) noexcept {
  if (type == RailData::type && ready_sent_ && (c.tag == controller_tag || c.tag == agent_tag)) {
    return step([&] { work_.rails().data(c, bytes.size(), bytes.data()); });
  }
  if (c.tag != controller_tag || type != Payload::type || !ready_sent_) {
    return JobProtocol::on_job_bulk(c, type, bytes);
  }
  step([&] { work_.payload(bytes.size(), bytes.data()); });
}

std::span<std::uint8_t> AgentProtocol::bulk_sink(Connection& c, std::uint8_t type,
                                                 std::size_t bytes) noexcept {
  if (type == RailData::type && ready_sent_ && (c.tag == controller_tag || c.tag == agent_tag)) {
    std::span<std::uint8_t> to;
    step([&] { to = work_.rails().sink(c, bytes); });
    return to;
  }
  if (c.tag != controller_tag || type != Payload::type || !ready_sent_) return {};
  return work_.payload_sink(bytes);
}

// Only a sink this job gave (PAYLOAD from the controller, a rail's RAIL_DATA) places bytes.
void AgentProtocol::on_bulk_placed(Connection& c, std::uint8_t type, std::size_t bytes) noexcept {
  if (type == RailData::type) return step([&] { work_.rails().data(c, bytes, nullptr); });
  step([&] { work_.payload(bytes, nullptr); });
}

void AgentProtocol::from_controller(Message&& m) {
  if (auto* join = std::get_if<Join>(&m)) return on_join(*join);
  // The controller's connection is also the link of a rail whose other end is the controller: what
  // comes for such a rail goes to the rails at once, but a RAIL_END for a rail this agent is the
  // source of, or will be (its RAIL still queued), is applied in order with the work.
  if (Rails::handles(m) && ready_sent_) {
    const auto* end = std::get_if<RailEnd>(&m);
    if (end == nullptr || work_.rails().holds_destination(end->rail)) {
      return work_.rails().message(*controller_, m);
    }
  }
  if (AgentWork::handles(m)) {
    if (!ready_sent_) {
      return fail("controller: malformed message: " +
                  std::string(std::visit([](const auto& x) { return x.name; }, m)) +
                  " before the job started");
    }
    work_.message(std::move(m));  // a throw fails the job (on_job_message's guard)
    return;
  }
  if (std::holds_alternative<Close>(m)) {
    // Applied in order, after the work before it (an opener may still run).
    work_.close([this] { end_in_order(); });
    return;
  }
  const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
  fail("controller: malformed message: " + std::string(name) + " is not one a controller sends");
}

// The work has let go of what the job held: tell the controller, and stop listening.
void AgentProtocol::end_in_order() {
  closed_in_order_ = true;
  mark_ended();
  controller_->send(Closed{});
  controller_->end(std::nullopt);
  each_connection([](Connection& other) {
    if (other.tag == agent_tag && other.state() == Connection::State::open) {
      other.end(Close{});
    }
  });
  stop_listening();
}

void AgentProtocol::on_join(const Join& join) {
  if (joined_) return fail("controller: malformed message: JOIN twice");
  if (join.names.size() != join.addresses.size()) {
    return fail("controller: malformed message: JOIN: " + std::to_string(join.names.size()) +
                " names and " + std::to_string(join.addresses.size()) + " addresses");
  }
  std::size_t me = join.names.size();
  for (std::size_t i = 0; i < join.names.size(); ++i) {
    if (join.names[i] == join.you) me = i;
  }
  if (me == join.names.size()) {
    return fail("controller: malformed message: JOIN: '" + printable(join.you) +
                "' is not among the names");
  }
  joined_ = true;
  join_ms_ = reactor_.now_ms();
  join_names_ = join.names;
  if (setup_.joined) {
    std::vector<std::string> shown;
    for (const std::string& name : join.names) shown.push_back(printable(name));
    setup_.joined(shown);
  }
  my_name_ = join.you;
  links_expected_ = join.names.size() - 1;
  for (std::size_t i = me + 1; i < join.names.size(); ++i) {
    // The controller's names are matched as they are, and escaped where a cause shows them.
    const std::string shown = printable(join.names[i]);
    if (auto address = parse_address(join.addresses[i]); !address) {
      return fail("controller: malformed message: JOIN: the address of " + shown + ": " +
                  address.error());
    }
    auto transport =
        setup_.dialer.dial(reactor_, timing_, join.names[i], join.addresses[i], nullptr);
    if (!transport) return fail(shown + ": " + transport.error());
    Connection& c = add_connection(shown);
    c.tag = dial_tag;
    DialerConfig config{Role::agent, my_name_, *job_, join.names[i], instance_};
    c.dial(std::move(*transport), Handshake::dialer(key_, config));
  }
  maybe_ready();
}

void AgentProtocol::maybe_ready() {
  if (!joined_ || ready_sent_ || links_proven_ < links_expected_ || has_failed()) return;
  ready_sent_ = true;
  controller_->send(Ready{setup_.host_arch, setup_.host_budget});
}

void AgentProtocol::tick(std::int64_t now) {
  strangers_tick(now);
  if (setup_.break_requested && setup_.break_requested() && !interrupted_) {
    interrupted_ = true;
    if (job_ && !ended()) {
      fail("interrupted");
    } else {
      mark_ended();
      stop_listening();
      if (finished()) shut();
    }
    return;
  }
  if (has_failed() || ended()) return;
  work_.tick();
  if (has_failed()) return;
  // The controller sends JOIN once every agent of the job has proven the key. It gives each
  // handshake_timeout_ms to connect and as long again to prove, and fails the job naming the one
  // that did not, telling this agent why: so this agent waits that long, and join_verdict_ms more
  // for the verdict to arrive, before it blames the controller. Else a slow agent elsewhere got
  // this healthy one blamed.
  const std::int64_t join_wait_ms = 2 * timing_.handshake_timeout_ms + timing_.join_verdict_ms;
  if (controller_ && !joined_ && now - controller_since_ms_ >= join_wait_ms) {
    return fail("controller: sent no JOIN within " + seconds_text(join_wait_ms));
  }
  if (joined_ && !ready_sent_ && now - join_ms_ >= timing_.handshake_timeout_ms) {
    // The cause names both ends of a connection that did not form: this agent and the first
    // other it has no proven connection with.
    std::string other = "another agent";
    for (const std::string& name : join_names_) {
      if (name != my_name_ && std::find(linked_.begin(), linked_.end(), name) == linked_.end()) {
        other = name;
        break;
      }
    }
    return fail(printable(my_name_) + " and " + printable(other) +
                " did not connect to each other within " +
                seconds_text(timing_.handshake_timeout_ms));
  }
}

// Nothing new may join a failed job.
void AgentProtocol::on_job_failed(const std::string&) noexcept {
  work_.shut();
  stop_listening();
}

void AgentProtocol::on_finished() noexcept {
  shut();
}

}  // namespace rig::remote
