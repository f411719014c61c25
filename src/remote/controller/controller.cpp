// The controller's side of a job: connect, the job's start (dial, prove, JOIN, READY), its hosts,
// close, and the process's exit.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "core/device.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "remote/controller/controller.hpp"
#include "remote/controller/runtime.hpp"
#include "remote/io/address.hpp"
#include "remote/job/report.hpp"

namespace rig::remote {
namespace {

// How often a caller's wait comes back to look for a requested break.
constexpr std::int64_t break_poll_ms = 200;

// The job this process has open, if any. Guarded by open_mu.
std::mutex open_mu;
std::shared_ptr<JobState> open_job;
// The job this process started last, open or not (devices() takes only its hosts).
std::weak_ptr<JobState> last_job;

// How many connections this process has made to each address, for "HOST:PORT#2".
std::map<std::string, int>& address_uses() {
  static auto* uses = new std::map<std::string, int>();
  return *uses;
}

}  // namespace

// ---- ControllerJob

ControllerJob::ControllerJob(Reactor& reactor, const Timing& timing, Key key,
                             std::shared_ptr<JobState> state, std::vector<Member> members)
    : JobCore(reactor, timing, std::move(key), process_instance()),
      state_(std::move(state)),
      members_(std::move(members)),
      id_(new_job_id()) {
  ticker_ = reactor_.add_ticker([this](std::int64_t now) { tick(now); });
}

ControllerJob::~ControllerJob() {
  reactor_.remove_ticker(ticker_);
}

void ControllerJob::start() {
  state_->sending = std::make_unique<std::atomic<bool>[]>(members_.size());
  state_->sending_count = members_.size();
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Connection& c = add_connection(members_[i].name);
    c.tag = i;
    c.set_sending_watch([state = state_.get(), i](bool sending) {
      state->sending[i].store(sending, std::memory_order_release);
      if (!sending) {
        state->send_progress.fetch_add(1, std::memory_order_release);
        state->send_progress.notify_all();
      }
    });
    members_[i].connection = &c;
    DialerConfig config{Role::controller, "controller", id_, members_[i].name, instance_};
    c.dial(reinterpret_cast<const sockaddr*>(&members_[i].address),
           Handshake::dialer(key_, std::move(config)));
  }
}

void ControllerJob::on_refused(Connection& c, const std::string& why) noexcept {
  fail(c.peer_name() + ": " + why);
}

void ControllerJob::on_proven(Connection& c) noexcept {
  if (has_failed()) return;
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
  (void)c;
}

void ControllerJob::on_job_message(Connection& c, Message&& m) noexcept {
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
    return fail(c.peer_name() + ": malformed message: " + std::string(name) + " before READY");
  }
  if (std::holds_alternative<Reached>(m))
    return answer(c, member, Expect::Kind::reached, std::move(m));
  if (std::holds_alternative<Opened>(m))
    return answer(c, member, Expect::Kind::opened, std::move(m));
  if (std::holds_alternative<Made>(m)) return answer(c, member, Expect::Kind::made, std::move(m));
  if (std::holds_alternative<Loaded>(m))
    return answer(c, member, Expect::Kind::loaded, std::move(m));
  if (std::holds_alternative<Closed>(m)) {
    // The agent has let go of the job and stopped listening; now both ends close the connection.
    member.closed = true;
    c.end(std::nullopt);
    return;
  }
  const std::string_view name = std::visit([](const auto& x) { return x.name; }, m);
  fail(c.peer_name() + ": malformed message: " + std::string(name) + " is not one an agent sends");
}

void ControllerJob::started() {
  std::vector<Device> hosts;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto core = std::make_shared<rig::detail::DeviceCore>(rig::detail::DeviceInfo{
        Kind::cpu, "CPU@" + members_[i].name, members_[i].host_arch, members_[i].host_budget});
    core->attach(std::make_unique<RemoteDriver>(state_, i, 0));
    members_[i].host = core;
    members_[i].devices[0] = core;
    try {
      rig::detail::Registry::get().add(core);
    } catch (const Lost& e) {
      fail(e.what());
      return;
    }
    hosts.push_back(Device(core));
  }
  {
    std::lock_guard lock(state_->mu);
    state_->hosts = std::move(hosts);
  }
  state_->report_started_line();
  state_->started.set();
}

void ControllerJob::send(std::size_t index, Bytes owned,
                         rig::detail::PoolVector<Connection::Piece> pieces,
                         std::optional<Expect> expect, std::shared_ptr<const void> keep) {
  Member* m = index < members_.size() ? &members_[index] : nullptr;
  if (has_failed() || closing_ || m == nullptr || m->connection == nullptr ||
      m->connection->state() != Connection::State::open) {
    if (expect && expect->reply) {
      const auto cause = outcome()->cause();
      expect->reply->failed = cause ? *cause : "the job has closed";
      expect->reply->done.set();
    }
    return;
  }
  if (expect) {
    if (expect->kind == Expect::Kind::reached) {
      auto device = m->devices.find(expect->device_id);
      if (device == m->devices.end()) return;  // not a device of this job: cannot happen
      expect->device = device->second;
    }
    m->expects.push_back(std::move(*expect));
  }
  std::function<void()> done;
  if (keep) done = [keep = std::move(keep)] {};
  m->connection->send_pieces(std::move(owned), pieces, std::move(done));
}

namespace {
const char* expect_name(Expect::Kind k) {
  switch (k) {
    case Expect::Kind::reached:
      return "REACHED";
    case Expect::Kind::opened:
      return "OPENED";
    case Expect::Kind::made:
      return "MADE";
    case Expect::Kind::loaded:
      return "LOADED";
  }
  return "?";
}
}  // namespace

void ControllerJob::answer(Connection& c, Member& member, Expect::Kind kind, Message&& m) {
  const std::string bad = c.peer_name() + ": malformed message: ";
  if (member.expects.empty() || member.expects.front().kind != kind) {
    return fail(bad + expect_name(kind) + " where " +
                (member.expects.empty() ? std::string("nothing")
                                        : std::string(expect_name(member.expects.front().kind))) +
                " was due");
  }
  Expect& e = member.expects.front();
  if (kind == Expect::Kind::reached) {
    const auto& r = std::get<Reached>(m);
    if (r.device != e.device_id || r.value != e.value) {
      return fail(bad + "REACHED device " + std::to_string(r.device) + " value " +
                  std::to_string(r.value) + " where device " + std::to_string(e.device_id) +
                  " value " + std::to_string(e.value) + " was due");
    }
    if (e.copy_index < e.copies.size()) {
      return fail(bad + "REACHED value " + std::to_string(r.value) + " before the bytes of its " +
                  "copies into this process's memory");
    }
    // The copies' bytes are in place: the value may now say so (release order, in publish).
    e.device->timeline().publish(e.value);
    static_cast<RemoteDriver&>(e.device->driver()).reached(e.inflight_bytes);
    member.expects.pop_front();  // drops the work, and with it the last use of its buffers
    return;
  }
  std::vector<Device> devices;
  if (kind == Expect::Kind::opened) devices = opened(member, c.tag, std::get<Opened>(m));
  if (has_failed()) return;
  std::shared_ptr<Reply> reply = std::move(e.reply);
  reply->devices = std::move(devices);
  member.expects.pop_front();
  reply->answer = std::move(m);
  reply->done.set();
}

std::vector<Device> ControllerJob::opened(Member& member, std::size_t index, const Opened& o) {
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
    auto core = std::make_shared<rig::detail::DeviceCore>(
        rig::detail::DeviceInfo{*kind, d.name + "@" + member.name, d.arch, d.budget});
    core->attach(std::make_unique<RemoteDriver>(state_, index, d.id));
    try {
      rig::detail::Registry::get().add(core);
    } catch (const Lost& e) {
      fail(e.what());
      return {};
    }
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
    static_cast<RemoteDriver&>(from->second->driver()).add_reach(r.to);
  }
  return out;
}

void ControllerJob::on_job_bulk(Connection& c, std::uint8_t type,
                                std::span<const std::uint8_t> bytes) noexcept {
  receive_data(c, type, bytes.size(), bytes.data());
}

std::span<std::uint8_t> ControllerJob::bulk_sink(Connection& c, std::uint8_t type,
                                                 std::size_t bytes) noexcept {
  if (type != Data::type || has_failed() || c.tag >= members_.size()) return {};
  Member& member = members_[c.tag];
  if (member.expects.empty() || member.expects.front().kind != Expect::Kind::reached) return {};
  Expect& e = member.expects.front();
  if (e.copy_index >= e.copies.size()) return {};
  const CopyBack& to = e.copies[e.copy_index];
  if (to.bytes - e.copy_done < bytes) return {};  // runs across copies: through on_job_bulk
  return {reinterpret_cast<std::uint8_t*>(to.at) + e.copy_done, bytes};
}

void ControllerJob::on_bulk_placed(Connection& c, std::uint8_t type, std::size_t bytes) noexcept {
  receive_data(c, type, bytes, nullptr);
}

void ControllerJob::receive_data(Connection& c, std::uint8_t type, std::size_t bytes,
                                 const std::uint8_t* from) {
  Member& member = members_[c.tag];
  const std::string bad = c.peer_name() + ": malformed message: ";
  if (type != Data::type) return fail(bad + "PAYLOAD is not one an agent sends");
  if (member.expects.empty() || member.expects.front().kind != Expect::Kind::reached) {
    return fail(bad + "DATA where no copy into this process's memory was due");
  }
  Expect& e = member.expects.front();
  // The bytes go where the copy asked, as they come; they may run across copies of the work.
  while (bytes > 0) {
    if (e.copy_index >= e.copies.size()) {
      return fail(bad + "DATA beyond the bytes of the copies of value " + std::to_string(e.value));
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

void ControllerJob::close() {
  if (has_failed() || closing_) return;
  closing_ = true;
  mark_ended();
  for (Member& m : members_) m.connection->send(Close{});
}

void ControllerJob::tick(std::int64_t now) {
  if (has_failed()) return;
  if (join_sent_ms_ != 0 && ready_ < members_.size() &&
      now - join_sent_ms_ >= timing_.handshake_timeout_ms) {
    for (const Member& m : members_) {
      if (!m.ready) {
        return fail(m.name + ": did not connect to the job's other agents within " +
                    seconds_text(timing_.handshake_timeout_ms));
      }
    }
  }
  // A host or proxy lost on this process other than by a close (rig::fail, say) fails the job.
  for (const Member& m : members_) {
    for (const auto& [id, device] : m.devices) {
      if (device->timeline().lost() && !device->closed()) return fail(device->timeline().why());
    }
  }
}

void ControllerJob::on_job_failed(const std::string& cause) noexcept {
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
  // Submits waiting for a connection to finish sending wake now, to find their devices lost.
  state_->send_progress.fetch_add(1, std::memory_order_release);
  state_->send_progress.notify_all();
  state_->report_failed(cause);
}

void ControllerJob::on_finished() noexcept {
  state_->finished.set();
  state_->core = nullptr;
  // The job is done with the loop: free it once this callback has unwound.
  Runtime::get().post([self = this] { delete self; });
}

// ---- JobState

void JobState::report_started_line() {
  if (!report_started.exchange(true)) write_report_line(report_fd, pid, "started");
}

void JobState::report_failed(const std::string& cause) {
  if (!report_ended.exchange(true)) write_report_line(report_fd, pid, "failed " + cause);
}

void JobState::report_closed() {
  if (!report_ended.exchange(true)) write_report_line(report_fd, pid, "closed");
}

// ---- The public calls.

const std::vector<Device>& Job::hosts() const {
  if (!s_) throw std::invalid_argument("rig: hosts() of an empty Job handle");
  return s_->hosts;
}

std::optional<std::string> Job::failed() const {
  if (!s_) return std::nullopt;
  if (s_->closed.load()) return std::nullopt;
  if (s_->pid != getpid()) return s_->fork_cause();
  return s_->outcome->cause();
}

std::optional<std::string> JobState::fork_cause() const {
  return std::string(
      "this process is a child of the job's controller (fork): the job's "
      "connections belong to the parent");
}

// Waits for `signal`, coming back every break_poll_ms to honour a requested break.
static void wait_breakable(const Signal& signal) {
  while (!signal.wait_for_ms(break_poll_ms)) {
    if (break_requested()) {
      clear_break();
      throw Break();
    }
  }
}

void Job::close() {
  if (!s_) throw std::invalid_argument("rig: close() of an empty Job handle");
  if (s_->closed.load()) return;
  if (s_->pid != getpid()) {
    s_->closed = true;
    return;
  }
  // Each machine's devices first, then its host: each waits for the work submitted to it.
  std::vector<Device> proxies;
  {
    std::lock_guard lock(s_->mu);
    for (const auto& [key, devices] : s_->opened) {
      proxies.insert(proxies.end(), devices.begin(), devices.end());
    }
  }
  for (const Device& d : proxies) {
    if (!failure(d)) rig::close(d);
  }
  for (const Device& h : s_->hosts) {
    if (!failure(h)) rig::close(h);
  }
  if (!s_->outcome->cause()) {
    if (!s_->close_sent.exchange(true)) {
      Runtime::get().post([s = s_] {
        if (s->core) s->core->close();
      });
    }
    wait_breakable(s_->finished);
  } else {
    for (const Device& d : proxies) rig::close(d);
    for (const Device& h : s_->hosts) rig::close(h);
  }
  if (!s_->outcome->cause()) s_->report_closed();
  s_->closed = true;
  std::lock_guard lock(open_mu);
  if (open_job == s_) open_job = nullptr;
}

namespace {

void close_at_exit() {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(open_mu);
    job = open_job;
  }
  if (!job || job->pid != getpid()) return;
  try {
    Job(job).close();
  } catch (...) {
    // Exit goes on: a break or a failure during the close leaves nothing more to do here.
  }
  // A job that failed is still draining its connections: the process waits for them.
  job->finished.wait_for_ms(job->timing.drain_timeout_ms + 2 * job->timing.tick_ms);
}

}  // namespace

Result<Job> connect_named(const Key& key, std::vector<Member> members, const Timing& timing,
                          int report_fd) {
  auto state = std::make_shared<JobState>();
  state->pid = getpid();
  state->timing = timing;
  state->report_fd = report_fd;
  {
    std::lock_guard lock(open_mu);
    if (open_job && !open_job->closed.load() && open_job->pid == getpid()) {
      throw std::invalid_argument("rig: connect: a job of this process is open; close it first");
    }
    open_job = state;
    last_job = state;
  }
  static const bool at_exit = [] {
    std::atexit(close_at_exit);
    return true;
  }();
  (void)at_exit;
  if (auto f = rig::detail::Registry::get().failure()) {
    std::lock_guard lock(open_mu);
    open_job = nullptr;
    const std::string cause = members.front().name + ": " + *f;
    state->report_failed(cause);
    return Error(cause);
  }
  Runtime& rt = Runtime::get();
  rt.call([&] {
    auto* job = new ControllerJob(rt.reactor(), timing, key, state, std::move(members));
    state->core = job;
    state->outcome = job->outcome();
    job->start();
  });
  // Started, or failed and every connection closed.
  while (!state->started.is_set() && !state->finished.is_set()) {
    state->started.wait_for_ms(break_poll_ms);
    if (state->outcome->cause()) break;
  }
  if (auto cause = state->outcome->cause()) {
    state->finished.wait_for_ms(timing.drain_timeout_ms + 2 * timing.tick_ms);
    std::lock_guard lock(open_mu);
    if (open_job == state) open_job = nullptr;
    return Error(*cause);
  }
  return Job(state);
}

Result<std::vector<Device>> devices(const Device& host, const std::string& kind) {
  const rig::detail::SignalsBlocked blocked;
  if (!host) throw std::invalid_argument("rig: devices() of an empty Device handle");
  const auto* driver = dynamic_cast<const RemoteDriver*>(&host.core()->driver());
  if (driver == nullptr || driver->id() != 0) {
    throw std::invalid_argument("rig: devices(): " + host.name() +
                                " is not a host that a job's hosts() gave");
  }
  auto job = driver->job().lock();
  {
    std::lock_guard lock(open_mu);
    if (!job || job != last_job.lock()) {
      throw std::invalid_argument("rig: devices(): " + host.name() +
                                  " is a host of a job other than this process's last");
    }
  }
  if (job->closed.load() || job->close_sent.load()) return Error("the job has closed");
  if (auto cause = job->outcome->cause()) return Error(*cause);
  const std::size_t member = driver->member();
  const auto key = std::make_pair(member, kind);
  {
    std::lock_guard lock(job->mu);
    if (auto it = job->opened.find(key); it != job->opened.end()) return it->second;
  }
  std::shared_ptr<Reply> reply;
  try {
    reply = round_trip(job, member, Open{kind}, Expect::Kind::opened);
  } catch (const Lost& e) {
    return Error(e.what());
  }
  const auto& opened = std::get<Opened>(*reply->answer);
  const std::string machine = host.name().substr(host.name().find('@') + 1);
  if (!opened.why.empty()) return Error(machine + ": " + opened.why);
  std::lock_guard lock(job->mu);
  // Two threads may open one kind at once: both get the same proxies, the first list is kept.
  return job->opened.emplace(key, reply->devices).first->second;
}

Result<Job> connect(const Key& key, const std::vector<Address>& agents) {
  if (agents.empty()) throw std::invalid_argument("rig: connect: no agents");
  std::set<Address> seen;
  for (const Address& a : agents) {
    if (!seen.insert(a).second) {
      throw std::invalid_argument("rig: connect: " + address_text(a.first, a.second) +
                                  " is listed twice");
    }
    if (a.second <= 0 || a.second > 65535) {
      throw std::invalid_argument("rig: connect: " + address_text(a.first, a.second) +
                                  ": port out of range");
    }
  }
  std::vector<Member> members;
  {
    std::lock_guard lock(open_mu);
    for (const Address& a : agents) {
      const std::string text = address_text(a.first, a.second);
      const int n = ++address_uses()[text];
      Member m;
      m.name = n == 1 ? text : text + "#" + std::to_string(n);
      m.dial_text = text;
      members.push_back(std::move(m));
    }
  }
  for (std::size_t i = 0; i < agents.size(); ++i) {
    auto addr = resolve(agents[i].first, agents[i].second);
    if (!addr) return Error(members[i].name + ": " + addr.error());
    members[i].address = *addr;
  }
  return connect_named(key, std::move(members), job_timing());
}

}  // namespace rig::remote
