// The controller's public calls: connect (and launched's start of a job), devices, a Job's hosts,
// failed and close, and the process's exit, which waits for its last job.
#include "remote/controller/controller.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "core/device.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "remote/controller/job_state.hpp"
#include "remote/controller/post.hpp"
#include "remote/controller/protocol.hpp"
#include "remote/controller/protocol_link.hpp"
#include "remote/controller/proxy.hpp"
#include "remote/controller/runtime.hpp"
#include "remote/io/address.hpp"
#include "remote/io/dialer.hpp"
#include "remote/job/process.hpp"

namespace rig::remote {
namespace {

// How often a caller's wait comes back to look for a requested break.
constexpr std::int64_t break_poll_ms = 200;

// The job this process has open, if any. Guarded by open_mu.
std::mutex open_mu;
std::shared_ptr<JobState> open_job;
// The job this process started last, open or not (devices() takes only its hosts).
std::weak_ptr<JobState> last_job;

// How many jobs of this process have dialed each address, for "HOST:PORT#2". Guarded by open_mu.
std::map<std::string, int>& address_uses() {
  static auto* uses = new std::map<std::string, int>();
  return *uses;
}

// The name the next job's connection to `dial_text` takes. open_mu held.
std::string address_name(const std::string& dial_text) {
  const auto it = address_uses().find(dial_text);
  const int n = (it == address_uses().end() ? 0 : it->second) + 1;
  return n == 1 ? dial_text : dial_text + "#" + std::to_string(n);
}

// A fork copies only the thread that calls it: in the child the loop and the parent's other
// threads are gone, so the open job is failed there at once (its hosts and proxies lost, its link
// answering without the loop) while the parent's job goes on. The parent holds open_mu and the
// job's lock across the fork, so the child finds the device lists whole, never half-written.
std::shared_ptr<JobState> forking_job;  // guarded by open_mu; set only across a fork

void before_fork() noexcept {
  open_mu.lock();
  forking_job = open_job;
  if (forking_job) forking_job->mu.lock();
}

void after_fork_in_parent() noexcept {
  if (forking_job) forking_job->mu.unlock();
  forking_job = nullptr;  // open_job still holds the state
  open_mu.unlock();
}

void after_fork_in_child() noexcept {
  const std::shared_ptr<JobState> job = std::move(forking_job);
  if (job) {
    job->in_child.store(true, std::memory_order_release);
    // Losing takes no lock (the timeline's cause is lock-free) and stops each driver.
    const std::string why = forked_cause;
    for (const auto& [key, devices] : job->opened) {
      for (const Device& d : devices) d.core()->lose(why);
    }
    for (const Device& h : job->hosts) h.core()->lose(why);
    job->mu.unlock();
  }
  open_mu.unlock();
}

}  // namespace

const std::vector<Device>& Job::hosts() const {
  if (!s_) throw std::invalid_argument("rig: hosts() of an empty Job handle");
  return s_->hosts;
}

std::optional<std::string> Job::failed() const {
  if (!s_) return std::nullopt;
  // No lock and no signal mask here: the cause is set once and read lock-free
  // (core/first_cause.hpp), so a signal handler may call failed() whatever its thread was doing.
  if (s_->closed.load()) return std::nullopt;
  if (s_->pid != getpid()) return forked_cause;  // any process but the one that connected
  return s_->cause();
}

// Waits for `event`, coming back every break_poll_ms to honour a requested break. Signal handlers
// may run meanwhile.
static void wait_breakable(const Event& event) {
  const rig::detail::SignalsOpen waiting;
  while (!event.wait_for_ms(break_poll_ms)) {
    if (break_requested()) {
      clear_break();
      throw Break();
    }
  }
}

void Job::close() {
  if (!s_) throw std::invalid_argument("rig: close() of an empty Job handle");
  const rig::detail::SignalsBlocked blocked;
  if (s_->closed.load()) return;
  if (s_->in_child.load(std::memory_order_acquire) || s_->pid != getpid()) {
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
    // No link: connect has not made the protocol yet (an exit during connect).
    if (!s_->close_sent.exchange(true) && s_->link) s_->link->close();
    wait_breakable(s_->finished);
  } else {
    for (const Device& d : proxies) rig::close(d);
    for (const Device& h : s_->hosts) rig::close(h);
  }
  if (!s_->outcome->cause()) s_->report.closed();
  s_->closed = true;
  std::lock_guard lock(open_mu);
  if (open_job == s_) open_job = nullptr;
}

namespace {

void close_at_exit() {
  // The last job, open or already closed by the user: a failed job that close let go of at once
  // may still be sending its abort and draining its connections, and the exit waits for those.
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(open_mu);
    job = open_job ? open_job : last_job.lock();
  }
  if (!job || job->pid != getpid() || job->in_child.load(std::memory_order_acquire)) return;
  if (!job->closed.load()) {
    try {
      Job(job).close();
    } catch (const std::exception& e) {
      // The exit's close could not end the job in order (a break, or a close rig refuses here,
      // such as from inside one of its calls): the job fails with the reason, which its agents
      // hear in the abort.
      job->link->fail(e.what());
    }
  }
  job->finished.wait_for_ms(job->timing.drain_timeout_ms + 2 * job->timing.tick_ms);
}

}  // namespace

Result<Job> connect_named(const Key& key, std::vector<Member> members, const Timing& timing,
                          int report_fd, Naming naming) {
  const rig::detail::SignalsBlocked blocked;
  // The runtime starts first: it reads its tunables then, and a bad one raises here, before this
  // job is the process's open one (which the exit would close).
  Runtime& rt = Runtime::get();
  auto state = std::make_shared<JobState>(getpid(), timing, report_fd, members.size());
  Reactor& reactor = rt.reactor();
  // Made before the state is the open job, so another thread's connect may read it (const after).
  state->link = std::make_shared<ProtocolLink>(reactor, *state);
  std::shared_ptr<JobState> open;
  {
    std::lock_guard lock(open_mu);
    if (open_job && !open_job->closed.load() && open_job->pid == getpid()) {
      open = open_job;
    } else {
      open_job = state;
      last_job = state;
    }
  }
  if (open) {
    // A loss here may have failed the open job a moment ago, before its tick has looked: it fails
    // now, so that whoever catches this sees the job's cause at once.
    if (open->link) open->link->notice_losses();
    throw std::invalid_argument("rig: connect: a job of this process is open; close it first");
  }
  static const bool at_exit_and_fork = [] {
    std::atexit(close_at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    return true;
  }();
  (void)at_exit_and_fork;
  if (auto f = rig::detail::Registry::get().failure()) {
    std::lock_guard lock(open_mu);
    open_job = nullptr;
    const std::string cause = members.front().name + ": " + *f;
    state->report.failed(cause);
    return Error(cause);
  }
  if (naming == Naming::by_address) {
    // The job dials from here on: its connections take their numbers now (none before, so a
    // connect that raised or failed earlier left the next one the same name).
    std::lock_guard lock(open_mu);
    for (Member& m : members) {
      m.name = address_name(m.dial_text);
      ++address_uses()[m.dial_text];
    }
  }
  for (const Member& m : members) {
    state->member_names.push_back(m.name);
    state->member_addresses.push_back(m.dial_text);
  }
  // The drivers hold the link weakly, sharing the state's ownership: a device whose driver is
  // using its job keeps the state alive meanwhile.
  const std::weak_ptr<JobLink> link = std::shared_ptr<JobLink>(state, state->link.get());
  const auto unregister = [&] {
    std::lock_guard lock(open_mu);
    if (open_job == state) open_job = nullptr;
  };
  try {
    rt.call([&] {
      ProtocolLink* door = state->link.get();
      auto* protocol =
          new ControllerProtocol(reactor, timing, key, process_instance(), new_job_id(), state,
                                 std::move(members), std::make_unique<RemoteProxies>(link),
                                 tcp_dialer(), [&reactor, door](ControllerProtocol& self) {
                                   door->detach();
                                   // The job is done with the loop: free it once this callback has
                                   // unwound.
                                   post_function(reactor, [p = &self] { delete p; });
                                 });
      state->outcome = protocol->outcome();
      door->attach(*protocol);
      // From here the job exists: a throw while it dials fails it, as any failure of its start.
      protocol->guarded([&] { protocol->start(); });
    });
  } catch (...) {
    // The protocol could not be made (out of memory): no job exists for the exit to close.
    unregister();
    throw;
  }
  // Started, or failed and every connection closed. Signal handlers may run in these waits.
  while (!state->started.is_set() && !state->finished.is_set()) {
    const rig::detail::SignalsOpen waiting;
    state->started.wait_for_ms(break_poll_ms);
    if (state->outcome->cause()) break;
  }
  if (auto cause = state->outcome->cause()) {
    {
      const rig::detail::SignalsOpen waiting;
      state->finished.wait_for_ms(timing.drain_timeout_ms + 2 * timing.tick_ms);
    }
    unregister();
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
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(open_mu);
    job = last_job.lock();
    if (!job || !driver->of_job(job)) {
      throw std::invalid_argument("rig: devices(): " + host.name() +
                                  " is a host of a job other than this process's last");
    }
  }
  if (job->closed.load() || job->close_sent.load()) return Error("the job has closed");
  if (auto cause = job->cause()) return Error(*cause);
  const std::size_t member = driver->member();
  const auto key = std::make_pair(member, kind);
  {
    std::lock_guard lock(job->mu);
    if (auto it = job->opened.find(key); it != job->opened.end()) return it->second;
  }
  std::shared_ptr<Reply> reply;
  try {
    reply = job->link->round_trip(member, Open{kind}, Expect::Kind::opened);
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

std::shared_ptr<JobState> job_of_device(const rig::detail::DeviceCore& device) {
  const auto* driver = dynamic_cast<const RemoteDriver*>(&device.driver());
  if (driver == nullptr) return nullptr;
  std::lock_guard lock(open_mu);
  auto job = last_job.lock();
  if (!job || !driver->of_job(job)) return nullptr;
  return job;
}

std::shared_ptr<JobState> job_of_host(const rig::detail::DeviceCore& host) {
  const auto* driver = dynamic_cast<const RemoteDriver*>(&host.driver());
  if (driver == nullptr || driver->id() != 0) return nullptr;
  return job_of_device(host);
}

Result<Job> connect(const Key& key, const std::vector<Address>& agents) {
  const rig::detail::SignalsBlocked blocked;
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
      Member m;
      m.dial_text = address_text(a.first, a.second);
      m.name = address_name(m.dial_text);  // what it will be called, if the job goes on to dial
      members.push_back(std::move(m));
    }
  }
  for (std::size_t i = 0; i < agents.size(); ++i) {
    auto addr = resolve(agents[i].first, agents[i].second);
    if (!addr) return Error(members[i].name + ": " + addr.error());
    members[i].address = *addr;
  }
  return connect_named(key, std::move(members), job_timing(), -1, Naming::by_address);
}

}  // namespace rig::remote
