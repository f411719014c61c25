#include "remote/agent/agent_rails.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <new>
#include <vector>

#include "core/device.hpp"
#include "core/pool.hpp"
#include "remote/limits.hpp"
#include "remote/wire/printable.hpp"
#include "rig/kernel.h"

namespace rig::remote {
namespace {

// What host code's rig_rail points at, one per slot of the count table (rail_count.hpp): static,
// so that a record a run still holds never points at freed memory, whatever became of its job.
// Owner: the table; the loop fills a record and empties it. Threads: the loop writes; host code
// reads through rig_rail's functions, which look at `live` and count themselves in `busy` first,
// so that the loop, emptying a record, waits out a call already past its look.
struct HostRecord {
  rig_rail record{};
  std::atomic<std::uint32_t> live{0};
  std::atomic<std::uint32_t> busy{0};
  std::uint32_t rail = 0;
  Reactor* reactor = nullptr;
  AgentRails* owner = nullptr;
  HeldRail* held = nullptr;
};
HostRecord records[rails_max];

// A round host code started, on its way to the loop. Owner: the poster, then the loop, which frees
// it once run. From the block pool: rig_rail_go may be called in a signal handler.
struct HostGo final : Command {
  std::uint32_t slot = 0;
  std::uint32_t rail = 0;
  void run(Reactor&) noexcept override {
    const HostRecord& h = records[slot];
    const std::uint32_t rail_id = rail;
    this->~HostGo();
    rig::detail::pool_release(this, sizeof(HostGo));
    // Loop thread, which alone empties records: the one looked at is the rail's, or its rail has
    // gone since (and the round with it).
    if (h.live.load(std::memory_order_acquire) != 0 && h.rail == rail_id) h.owner->host_go(rail_id);
  }
};

// Posts round(s) host code numbered to the loop, which starts them; the new round's number (or
// `round`, numbered already), 0 if there was no memory for the message.
std::uint64_t post_go(HostRecord* h, std::uint64_t round) noexcept {
  void* at = nullptr;
  try {
    at = rig::detail::pool_allocate(sizeof(HostGo));
  } catch (...) {
    at = nullptr;  // no memory for the message: no round
  }
  if (at == nullptr) return 0;
  auto* go = new (at) HostGo();
  go->slot = static_cast<std::uint32_t>(h - records);
  go->rail = h->rail;
  if (round == 0) round = h->held->numbered.fetch_add(1, std::memory_order_acq_rel) + 1;
  h->reactor->post(go);
  return round;
}

std::uint64_t rail_go(rig_rail* r) noexcept {
  auto* h = static_cast<HostRecord*>(r->context);
  if (r->is_source == 0) return 0;
  h->busy.fetch_add(1, std::memory_order_seq_cst);
  std::uint64_t round = 0;
  if (h->live.load(std::memory_order_seq_cst) != 0 && rig_rail_sent(r) != RIG_RAIL_RAISED) {
    // A small round whose link has nothing else to send leaves from this thread (Rails::
    // write_round): the post, the loop's wake-up and its turn were most of a host-code round trip
    // on one core (bench/README.md, "Session 18").
    std::array<std::uint8_t, direct_write_bytes_max> message;
    std::size_t rest_at = 0, rest_end = 0;
    const Rails::Written w = Rails::write_round(*h->held, message, rest_at, rest_end);
    switch (w.how) {
      case Rails::Written::How::not_tried:
        round = post_go(h, 0);
        break;
      case Rails::Written::How::posted: {
        // Numbered already: the loop sends it. Without memory to tell it so there is no round,
        // unless another thread numbered one since, whose post starts this one too.
        round = post_go(h, w.round);
        std::uint64_t numbered = w.round;
        if (round == 0 && !h->held->numbered.compare_exchange_strong(numbered, w.round - 1,
                                                                     std::memory_order_acq_rel)) {
          round = w.round;
        }
        break;
      }
      case Rails::Written::How::all:
        round = w.round;
        break;
      case Rails::Written::How::part:
        round = w.round;
        (void)post_rest(*h->reactor, h->held->lane,
                        std::span(message).subspan(rest_at, rest_end - rest_at));
        break;
    }
  }
  h->busy.fetch_sub(1, std::memory_order_seq_cst);
  return round;
}

std::uint64_t rail_wait(rig_rail* r, int which, std::uint64_t round) noexcept {
  const auto* word = reinterpret_cast<const RailWord*>(which == 0 ? r->sent : r->arrived);
  if (which == 0 || r->is_source != 0 || word->get() >= round) return word->wait(round);
  // A destination's arrival: read it off the link, if the loop lends the socket (ReadLane).
  auto* h = static_cast<HostRecord*>(r->context);
  std::shared_ptr<ReadLane> lane;
  std::uint32_t id = 0;
  h->busy.fetch_add(1, std::memory_order_seq_cst);
  if (h->live.load(std::memory_order_seq_cst) != 0) {
    lane = h->held->read_lane;
    id = h->rail;
  }
  h->busy.fetch_sub(1, std::memory_order_seq_cst);
  if (!lane) return word->wait(round);
  return Rails::wait_reading(*word, *lane, id, round);
}

}  // namespace

AgentRails::AgentRails(Reactor& reactor, Fail fail, std::function<void()> resume)
    : reactor_(reactor),
      fail_(std::move(fail)),
      resume_(std::move(resume)),
      rails_(
          reactor,
          Rails::Events{[this](HeldRail& rail, std::uint64_t round) { moved(rail, round, false); },
                        [this](HeldRail& rail, std::uint64_t round) { moved(rail, round, true); },
                        [this](HeldRail& rail) { forget_record(rail); },
                        [this](const std::string& cause) { fail_(cause); }}) {}

AgentRails::~AgentRails() {
  shut();
}

void AgentRails::shut() noexcept {
  if (shut_) return;
  shut_ = true;
  under_way_.clear();
  rails_.raise_all();
  rails_.each([this](HeldRail& rail) { forget_record(rail); });
}

bool AgentRails::conflicts(const Message& m, const UnderWay& u) const {
  const auto it = memory_of_.find(u.rail);
  if (it == memory_of_.end()) return false;
  const auto& ids = it->second;
  const auto mine = [&](std::uint64_t memory) {
    return memory != 0 && std::find(ids.begin(), ids.end(), memory) != ids.end();
  };
  // A round being sent only reads its sources: what waits for it is what writes them. A round
  // arriving writes its destinations: everything that uses them waits.
  const bool writes_only = !u.arrived;
  if (const auto* s = std::get_if<Submit>(&m)) {
    for (const WirePart& p : s->parts) {
      if (mine(p.dst) || (!writes_only && mine(p.src))) return true;
      for (const WireArg& a : p.args) {
        // Host code given the rail may drive it: it waits for the controller's rounds.
        if (a.access == WireArg::rail) {
          if (a.memory == u.rail) return true;
          continue;
        }
        const bool writes = a.access != static_cast<std::uint8_t>(Access::read);
        if (mine(a.memory) && (writes || !writes_only)) return true;
      }
    }
    return false;
  }
  // Another rail's round over the same memory: a later round of this rail is ordered by its link
  // already (its bytes follow this round's), and two rounds that only read do not conflict.
  const auto overlaps = [&](std::uint32_t other) {
    if (other == u.rail) return false;
    const auto o = memory_of_.find(other);
    return o != memory_of_.end() && std::any_of(o->second.begin(), o->second.end(), mine);
  };
  if (const auto* g = std::get_if<RailGo>(&m)) return !writes_only && overlaps(g->rail);
  if (const auto* e = std::get_if<RailExpect>(&m)) return overlaps(e->rail);
  if (const auto* a = std::get_if<RailAwait>(&m)) return overlaps(a->rail);
  return false;
}

bool AgentRails::holds(const Message& m) const {
  for (const UnderWay& u : under_way_) {
    if (conflicts(m, u)) return true;
  }
  return false;
}

void AgentRails::forget_record(HeldRail& rail) noexcept {
  try {
    if (!rail.source) let_go_.insert(rail.id);
  } catch (...) {
    // No memory to remember it: a RAIL_AWAIT still on its way for it fails the job, named.
  }
  HostRecord& h = records[rail.counts->slot()];
  if (h.owner != this || h.rail != rail.id) return;
  h.live.store(0, std::memory_order_seq_cst);
  while (h.busy.load(std::memory_order_seq_cst) != 0) sched_yield();
  h.owner = nullptr;
  h.held = nullptr;
  memory_of_.erase(rail.id);
}

HeldRail* AgentRails::held(std::uint32_t id, std::string_view message, bool source) {
  HeldRail* rail = rails_.find(id);
  if (rail == nullptr) {
    fail_(std::string(message) + " names rail " + std::to_string(id) +
          ", which the job does not hold on this machine");
    return nullptr;
  }
  if (rail->source != source) {
    fail_("controller: malformed message: " + std::string(message) + " names rail " +
          std::to_string(id) + ", of which this machine is not the " +
          (source ? "source" : "destination"));
    return nullptr;
  }
  return rail;
}

void AgentRails::make(const RailMake& m, const std::map<std::uint64_t, Buffer>& memory) {
  if (shut_) return;
  const std::string bad = "controller: malformed message: RAIL ";
  if (m.rail == 0 || rails_.find(m.rail) != nullptr) {
    return fail_(bad + "names rail " + std::to_string(m.rail) + ", which is no new rail");
  }
  if (m.role > RailMake::destination) return fail_(bad + "role " + std::to_string(m.role));
  if (m.parts.empty()) return fail_(bad + "with no transfers");
  Connection* link = m.peer.empty() ? controller_ : (find_link_ ? find_link_(m.peer) : nullptr);
  if (link == nullptr) {
    return fail_(bad + "names '" + printable(m.peer) +
                 "' as its other end, which is no machine of the job connected to this one");
  }
  std::vector<std::span<std::byte>> parts;
  auto keep = std::make_shared<std::vector<Buffer>>();
  for (std::size_t i = 0; i < m.parts.size(); ++i) {
    const WireRailPart& p = m.parts[i];
    auto it = memory.find(p.memory);
    if (it == memory.end()) {
      return fail_("RAIL names memory " + std::to_string(p.memory) +
                   ", which the job does not hold on this machine");
    }
    const Buffer& b = it->second;
    if (b.device() != rig::host()) {
      return fail_("RAIL names memory " + std::to_string(p.memory) + ", which is on " +
                   b.device().name() + ", not on this machine's host");
    }
    if (p.bytes == 0 || p.offset > b.size() || p.bytes > b.size() - p.offset) {
      return fail_(bad + "transfer " + std::to_string(i) + ": " + std::to_string(p.bytes) +
                   " bytes at " + std::to_string(p.offset) + " of memory " +
                   std::to_string(p.memory) + " of " + std::to_string(b.size()) + " bytes");
    }
    // The loop touches no byte here: the work's order says when the memory is the rail's.
    parts.emplace_back(b.core()->data() + p.offset, static_cast<std::size_t>(p.bytes));
    keep->push_back(b);
  }
  const bool source = m.role == RailMake::source;
  if (auto why = rails_.add(m.rail, source, *link, std::move(parts), keep)) {
    controller_->send(RailMade{*why});
    return;
  }
  HeldRail& rail = *rails_.find(m.rail);
  rail.source_waits = !source && link == controller_;
  // Host code on this machine may wait for the rounds another agent sends it.
  if (!source && link != controller_) rails_.let_host_read(rail);
  std::vector<std::uint64_t> ids;
  for (const WireRailPart& p : m.parts) ids.push_back(p.memory);
  memory_of_[m.rail] = std::move(ids);
  HostRecord& h = records[rail.counts->slot()];
  h.record.sent = reinterpret_cast<const std::uint64_t*>(&rail.counts->sent());
  h.record.arrived = reinterpret_cast<const std::uint64_t*>(&rail.counts->arrived());
  h.record.go = rail_go;
  h.record.wait = rail_wait;
  h.record.is_source = source ? 1 : 0;
  h.record.reserved = 0;
  h.record.context = &h;
  h.rail = m.rail;
  h.reactor = &reactor_;
  h.owner = this;
  h.held = &rail;
  h.live.store(1, std::memory_order_seq_cst);
  controller_->send(RailMade{""});
}

void AgentRails::go(const RailGo& m) {
  if (shut_) return;
  HeldRail* rail = held(m.rail, "RAIL_GO", true);
  if (rail == nullptr) return;
  std::uint64_t expected = m.round - 1;
  if (!rail->numbered.compare_exchange_strong(expected, m.round, std::memory_order_acq_rel)) {
    // Rounds numbered here beyond those the loop started came from host code.
    if (expected == rail->started) {
      return fail_("controller: malformed message: RAIL_GO of round " + std::to_string(m.round) +
                   " of rail " + std::to_string(m.rail) + " where round " +
                   std::to_string(expected + 1) + " was due");
    }
    return fail_("RAIL_GO of round " + std::to_string(m.round) + " of rail " +
                 std::to_string(m.rail) + ", where host code has numbered " +
                 std::to_string(expected) + " rounds: a rail given to host code is driven there");
  }
  if (m.ahead > 1) {
    return fail_("controller: malformed message: RAIL_GO of rail " + std::to_string(m.rail) +
                 " with ahead " + std::to_string(m.ahead));
  }
  // A destination that is the controller is ready for the round already (rig's go() waited), and
  // so is one the controller did not ask (`ahead`: nothing there for the round to follow). The
  // round may be sent within this call (the kernel took every chunk at once): the work then goes
  // on at once, and waits only if it was not.
  rail->driven = m.round;
  rails_.go(*rail, m.round, m.ahead == 0 && rail->link != controller_, "controller");
  if (rail->counts->sent().get() < m.round) under_way_.push_back({m.rail, m.round, false});
}

void AgentRails::expect(const RailExpect& m) {
  if (shut_) return;
  HeldRail* rail = held(m.rail, "RAIL_EXPECT", false);
  if (rail == nullptr) return;
  rail->driven = std::max(rail->driven, m.round);
  if (const std::uint64_t arrived = rail->counts->arrived().get(); arrived >= m.round) {
    // Its count may be waiting for a later write: the controller waits for it now.
    if (controller_ != nullptr && controller_->state() == Connection::State::open) {
      controller_->send(RailCount{m.rail, RailCount::arrived, arrived});
    }
    return;
  }
  under_way_.push_back({m.rail, m.round, true});
  rails_.say_ready(*rail, m.round);
}

void AgentRails::await(const RailAwait& m) {
  if (shut_) return;
  // It rode on a later write than the rail's last round, whose RAIL_END (on the link, after that
  // round's bytes) may have come first: every round of the rail has arrived.
  if (rails_.find(m.rail) == nullptr && let_go_.count(m.rail) != 0) return;
  HeldRail* rail = held(m.rail, "RAIL_AWAIT", false);
  if (rail == nullptr) return;
  rail->driven = std::max(rail->driven, m.round);
  // It rides on the controller's next write, so the round has often arrived (and been reported:
  // its chunks said it was the controller's) by now.
  if (rail->counts->arrived().get() >= m.round) return;
  under_way_.push_back({m.rail, m.round, true});
}

void AgentRails::end(const RailEnd& m) {
  if (shut_) return;
  HeldRail* rail = held(m.rail, "RAIL_END", true);
  if (rail == nullptr) return;
  rails_.end(*rail);
}

std::optional<std::uint64_t> AgentRails::record_word(std::uint64_t id) const {
  if (id == 0 || id > UINT32_MAX) return std::nullopt;
  HeldRail* rail = const_cast<Rails&>(rails_).find(static_cast<std::uint32_t>(id));
  if (rail == nullptr) return std::nullopt;
  return reinterpret_cast<std::uint64_t>(&records[rail->counts->slot()].record);
}

void AgentRails::host_go(std::uint32_t id) {
  if (shut_) return;
  if (HeldRail* rail = rails_.find(id)) rails_.host_go(*rail);
}

void AgentRails::moved(HeldRail& rail, std::uint64_t round, bool arrived) {
  // The controller keeps both counts of every rail: the source tells it of sent rounds, the
  // destination of arrived ones (Rails has told the link's other end already, which may be the
  // controller itself).
  if (controller_ != nullptr && controller_->state() == Connection::State::open &&
      (!arrived || rail.link != controller_)) {
    // The controller waits for the arrival of the rounds it started. Their sent count it does not
    // wait for: the destination's arrived count says it too (RailCounts::arrive).
    send_count(*controller_, rail,
               RailCount{rail.id, arrived ? RailCount::arrived : RailCount::sent, round},
               arrived && round <= rail.driven);
  }
  const auto done = [&](const UnderWay& u) {
    return u.rail == rail.id && u.arrived == arrived && round >= u.round;
  };
  const auto before = under_way_.size();
  std::erase_if(under_way_, done);
  if (under_way_.size() != before && resume_) resume_();
}

}  // namespace rig::remote
