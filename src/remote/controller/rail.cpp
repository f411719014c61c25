// Rails on the controller: validation, the rail's device, go(), the counts, Arg::rail, record().
#include "remote/controller/rail.hpp"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/signals.hpp"
#include "remote/controller/controller.hpp"
#include "remote/controller/job_state.hpp"
#include "remote/controller/protocol_link.hpp"
#include "remote/controller/proxy.hpp"
#include "remote/limits.hpp"

namespace rig::remote {
namespace {

[[noreturn]] void misuse(const std::string& what) {
  throw std::invalid_argument("rig: rail: " + what);
}

std::string range_text(std::size_t offset, std::size_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
         std::to_string(bytes) + ")";
}

bool is_local_host(const rig::detail::DeviceCore& d) {
  return &d == rig::host().core().get();
}

// A buffer's end of a transfer: this process's host, or a host of `job` (its member's index).
struct End {
  std::shared_ptr<rig::detail::DeviceCore> host;
  std::size_t member = RailPlan::controller;
};

End end_of(const Buffer& b, std::size_t i, const char* side, std::shared_ptr<JobState>& job) {
  const auto& host = b.core()->device();
  if (is_local_host(*host)) return {host, RailPlan::controller};
  const auto* driver = dynamic_cast<const RemoteDriver*>(&host->driver());
  if (driver == nullptr || driver->id() != 0) {
    misuse("transfer " + std::to_string(i) + ": the " + side + " buffer is on " +
           host->info().name + ", not on a machine's host: a rail runs between host memory");
  }
  auto of = job_of_host(*host);
  if (!of) {
    misuse("transfer " + std::to_string(i) + ": the " + side + " buffer is on " +
           host->info().name + ", a host of a job other than this process's last");
  }
  if (job && job != of) misuse("the buffers are on hosts of two jobs");
  job = std::move(of);
  return {host, driver->member()};
}

// Closes the rail's requests if the loop never took them (the job finished meanwhile).
struct Handing {
  std::shared_ptr<Reply> source, destination;
  std::shared_ptr<JobOutcome> outcome;
  bool handed = false;
  ~Handing() {
    if (handed) return;
    const auto cause = outcome->cause();
    for (const auto& r : {source, destination}) {
      if (!r) continue;
      r->failed = cause ? *cause : "the job has closed";
      r->done.set();
    }
  }
};

const RailCore& core_of(const Rail& r) {
  if (!r) throw std::invalid_argument("rig: use of an empty Rail handle");
  return *r.core();
}

void wait_count(const RailCore& c, const RailWord& word, std::uint64_t round) {
  // The word is read, and waited for, with no lock and no allocation, so with the caller's own
  // signal mask: a handler may run in the wait and call rig as a call of its own. Only a raised
  // count (the job's failure, or a child of fork) needs more, the cause, under a lock, so with the
  // signals blocked. A pipelined waiter so makes no system call for a round that has arrived, where
  // blocking the signals and opening them for the wait took four (bench/README.md, "Session 29").
  std::uint64_t seen = word.get();
  if (seen < round) seen = word.wait(round);
  if (seen != rail_raised) return;
  const rig::detail::SignalsBlocked blocked;
  c.check_not_failed();
}

}  // namespace

// ---- RailDriver

void RailDriver::admit(const rig::detail::Work&) {
  // The round's first message goes to the source's process, or to the destination when the
  // source is this one: wait while that connection sends an earlier message, and while the rail
  // has more than its share of rounds not yet arrived.
  const std::size_t first = source_ != RailPlan::controller ? source_ : destination_;
  if (auto link = link_.lock()) link->sending().wait_while_sending(first, flow_);
  flow_.wait_for_room();
}

void RailDriver::ready(const rig::detail::Work& work) {
  for (const rig::detail::Dep& dep : work.deps) {
    // Between two agents, work on either end's machine is in order with the round there (the
    // source takes nothing after RAIL_GO until its sources are read, the destination nothing
    // after RAIL_EXPECT until the round has arrived), and so is another such rail's round.
    if (between_agents()) {
      const auto& driver = dep.device->driver();
      if (const auto* r = dynamic_cast<const RemoteDriver*>(&driver); r && ends_at(r->member())) {
        continue;
      }
      if (const auto* rd = dynamic_cast<const RailDriver*>(&driver);
          rd && rd->between_agents() && (rd->ends_at(source_) || rd->ends_at(destination_))) {
        continue;
      }
    }
    // Else the memory is this process's, or the work elsewhere: it is done first.
    const rig::detail::SignalsOpen waiting;
    dep.device->timeline().wait(dep.value);
  }
}

bool RailDriver::nothing_due_at_destination(const rig::detail::Work& work) const {
  for (const rig::detail::Dep& dep : work.deps) {
    if (dep.device->timeline().reached() >= dep.value) continue;  // done there
    const auto& driver = dep.device->driver();
    if (const auto* r = dynamic_cast<const RemoteDriver*>(&driver);
        r != nullptr && r->member() == destination_) {
      return false;
    }
    if (const auto* rd = dynamic_cast<const RailDriver*>(&driver);
        rd != nullptr && rd != this && rd->ends_at(destination_)) {
      return false;
    }
  }
  return true;
}

void RailDriver::enqueue(rig::detail::Work work) {
  auto link = link_.lock();
  if (!link) return;  // lost already, and its waiters know
  flow_.take(inflight_cost(work));
  const std::uint64_t round = work.value;
  // The round's memory at the destination was last used by an earlier round of this rail, which
  // the link keeps in order, or by work done there already: no RAIL_READY need be asked for.
  const bool ahead = nothing_due_at_destination(work);
  auto held = std::make_shared<rig::detail::Work>(std::move(work));
  link->with_rails([id = id_, round, held, ahead](RailSide& side) {
    side.go_rail(id, round, std::move(*held), ahead);
  });
}

// ---- RailCore

RailCore::~RailCore() {
  if (auto l = link.lock()) l->with_rails([id = id](RailSide& side) { side.end_rail(id); });
}

void RailCore::check_not_failed() const {
  if (pid != getpid()) throw Lost(forked_cause);
  if (auto cause = outcome->cause()) throw Lost(*cause);
}

void RailCore::check_run_on(const rig::detail::DeviceCore& d) const {
  const auto* driver = dynamic_cast<const RemoteDriver*>(&d.driver());
  const bool end =
      driver != nullptr && driver->id() == 0 && (&d == from.core().get() || &d == to.core().get());
  if (!end) {
    throw std::invalid_argument("rig: a run on " + d.info().name + " cannot take rail " +
                                std::to_string(id) + ": only host code on one of its agent ends (" +
                                from.name() + ", " + to.name() + ") can");
  }
  in_host_code.store(true, std::memory_order_release);
}

// ---- the public calls

const Device& Rail::from() const {
  return core_of(*this).from;
}
const Device& Rail::to() const {
  return core_of(*this).to;
}

std::uint64_t Rail::go() {
  const RailCore& c = core_of(*this);
  const rig::detail::SignalsBlocked blocked;
  // The counts are raised in a child of fork (rail_count.cpp) and once the job has failed here:
  // only then is the cause looked up (getpid is a system call). A failure whose counts are not
  // raised yet is found by the submission, whose device shares the job's cause.
  if (c.counts->sent().get() == rail_raised) c.check_not_failed();
  if (c.in_host_code.load(std::memory_order_acquire)) {
    throw std::invalid_argument("rig: go() of rail " + std::to_string(c.id) +
                                ": the rail was given to host code (Arg::rail), where its rounds "
                                "start from now on");
  }
  const auto job = c.job.lock();
  if (!job || job->closed.load() || job->close_sent.load()) {
    throw std::invalid_argument("rig: go() of rail " + std::to_string(c.id) +
                                ": the job has closed");
  }
  return rig::submit(Device(c.device), std::span<const Part>(c.parts));
}

// In a child of fork the table's words are raised (rail_count.cpp): no look at the pid is needed.
std::uint64_t Rail::sent() const {
  return core_of(*this).counts->sent().get();
}

std::uint64_t Rail::arrived() const {
  return core_of(*this).counts->arrived().get();
}

void Rail::wait_sent(std::uint64_t round) const {
  const RailCore& c = core_of(*this);
  wait_count(c, c.counts->sent(), round);
}

void Rail::wait_arrived(std::uint64_t round) const {
  const RailCore& c = core_of(*this);
  wait_count(c, c.counts->arrived(), round);
}

Result<Rail> rail(std::span<const Transfer> transfers) {
  const rig::detail::SignalsBlocked blocked;
  if (transfers.empty()) misuse("no transfers");
  if (transfers.size() > rail_transfers_max) {
    misuse(std::to_string(transfers.size()) + " transfers, more than the " +
           std::to_string(rail_transfers_max) + " a rail takes");
  }
  std::shared_ptr<JobState> job;
  End from, to;
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    const std::string which = "transfer " + std::to_string(i) + ": ";
    if (!t.from || !t.to) misuse(which + "an empty Buffer handle");
    if (t.bytes == 0) misuse(which + "it copies no bytes");
    for (const auto& [b, offset, side] : {std::tuple{&t.from, t.from_offset, "source"},
                                          std::tuple{&t.to, t.to_offset, "destination"}}) {
      if (offset > b->size() || t.bytes > b->size() - offset) {
        misuse(which + side + " range " + range_text(offset, t.bytes) +
               " is outside its buffer of " + std::to_string(b->size()) + " bytes on " +
               b->device().name());
      }
    }
    const End f = end_of(t.from, i, "source", job);
    const End d = end_of(t.to, i, "destination", job);
    // A closed job's buffers are gone: that it closed is the reason, as for a failed one.
    if (job && (job->closed.load() || job->close_sent.load())) return Error("the job has closed");
    if (job) {
      if (auto cause = job->cause()) return Error(*cause);
    }
    t.from.core()->check_usable();
    t.to.core()->check_usable();
    if (i == 0) {
      from = f;
      to = d;
      continue;
    }
    if (f.host != from.host) {
      misuse(which + "its source is on " + f.host->info().name + ", transfer 0's on " +
             from.host->info().name + ": every source of a rail is on one machine's host");
    }
    if (d.host != to.host) {
      misuse(which + "its destination is on " + d.host->info().name + ", transfer 0's on " +
             to.host->info().name + ": every destination of a rail is on one machine's host");
    }
  }
  if (from.host == to.host) {
    misuse("every source and destination is on " + from.host->info().name +
           ": a rail runs between two machines");
  }
  if (!job) misuse("no buffer is on a host of a job");
  // Two transfers must not write the same byte: a round's result would hang on their order.
  std::vector<std::size_t> order(transfers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = transfers[a];
    const auto& y = transfers[b];
    if (x.to.core() != y.to.core()) return x.to.core() < y.to.core();
    return x.to_offset < y.to_offset;
  });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const Transfer& a = transfers[order[k - 1]];
    const Transfer& b = transfers[order[k]];
    if (a.to.core() == b.to.core() && b.to_offset < a.to_offset + a.bytes) {
      misuse("transfers " + std::to_string(std::min(order[k - 1], order[k])) + " and " +
             std::to_string(std::max(order[k - 1], order[k])) +
             " write overlapping bytes of their destination buffer on " + b.to.device().name());
    }
  }
  if (job->closed.load() || job->close_sent.load()) return Error("the job has closed");
  if (auto cause = job->cause()) return Error(*cause);

  auto counts = RailCounts::take();
  if (!counts) {
    return Error("this process holds " + std::to_string(rails_max) + " rails already");
  }
  auto core = std::make_shared<RailCore>();
  core->id = job->next_rail.fetch_add(1) + 1;
  core->pid = job->pid;
  core->from = Device(from.host);
  core->to = Device(to.host);
  core->source = from.member;
  core->destination = to.member;
  core->transfers.assign(transfers.begin(), transfers.end());
  for (const Transfer& t : transfers) {
    core->parts.emplace_back(Copy{t.to, t.to_offset, t.from, t.from_offset, t.bytes});
  }
  core->counts = std::make_shared<RailCounts>(std::move(*counts));
  core->link = std::shared_ptr<JobLink>(job, job->link.get());
  core->outcome = job->outcome;
  core->job = job;
  core->device = std::make_shared<rig::detail::DeviceCore>(rig::detail::DeviceInfo{
      Kind::cpu,
      "rail " + std::to_string(core->id) + " from " + core->from.name() + " to " + core->to.name(),
      "", 0});
  core->device->timeline().share_cause(JobOutcome::shared(job->outcome));
  core->device->attach(std::make_unique<RailDriver>(core->link, core->id, from.member, to.member,
                                                    from.host, to.host));

  RailPlan plan;
  plan.id = core->id;
  plan.source = from.member;
  plan.destination = to.member;
  auto keep = std::make_shared<std::vector<Transfer>>(core->transfers);
  for (const Transfer& t : transfers) {
    plan.source_parts.push_back({t.from.core()->address(), t.from_offset, t.bytes});
    plan.destination_parts.push_back({t.to.core()->address(), t.to_offset, t.bytes});
    if (from.member == RailPlan::controller) {
      plan.own_parts.emplace_back(t.from.core()->data() + t.from_offset, t.bytes);
    } else if (to.member == RailPlan::controller) {
      plan.own_parts.emplace_back(t.to.core()->data() + t.to_offset, t.bytes);
    }
  }
  plan.keep = std::move(keep);
  plan.counts = core->counts;
  plan.device = core->device;
  plan.round_arrived = [driver = static_cast<RailDriver*>(&core->device->driver()),
                        device = core->device](const rig::detail::Work& round) {
    driver->arrived(round);
  };

  auto handing = std::make_shared<Handing>();
  handing->outcome = job->outcome;
  if (from.member != RailPlan::controller) handing->source = std::make_shared<Reply>();
  if (to.member != RailPlan::controller) handing->destination = std::make_shared<Reply>();
  job->link->with_rails([plan = std::move(plan), handing](RailSide& side) mutable {
    handing->handed = true;
    side.add_rail(std::move(plan), handing->source, handing->destination);
  });
  const auto source = handing->source;
  const auto destination = handing->destination;
  handing.reset();  // the loop's copy answers for them now, or the drop that frees it
  try {
    for (const auto& [reply, end] :
         {std::pair{source, &core->from}, std::pair{destination, &core->to}}) {
      if (!reply) continue;
      JobLink::await(*reply);
      const auto& made = std::get<RailMade>(*reply->answer);
      if (!made.why.empty()) {
        const std::string& name = end->name();
        return Error(name.substr(name.find('@') + 1) + ": " + made.why);
      }
    }
  } catch (const Lost& e) {
    return Error(e.what());
  }
  return Rail(std::move(core));
}

std::optional<Record> record(const Device& d) {
  if (!d) return std::nullopt;
  const auto* driver = dynamic_cast<const RemoteDriver*>(&d.core()->driver());
  if (driver == nullptr) return std::nullopt;
  auto job = job_of_device(*d.core());
  if (!job) return std::nullopt;
  Record r;
  r.of = driver->id() == 0 ? Record::Of::host : Record::Of::device;
  r.device = driver->id();
  if (driver->member() < job->member_names.size()) {
    r.machine = job->member_names[driver->member()];
    r.address = job->member_addresses[driver->member()];
  }
  if (r.of == Record::Of::host) r.make_rail = &rail;
  return r;
}

}  // namespace rig::remote

namespace rig {

Arg Arg::rail(const remote::Rail& r) {
  if (!r) throw std::invalid_argument("rig: Arg::rail of an empty Rail handle");
  return Arg{Object{r.core()}};
}

}  // namespace rig
