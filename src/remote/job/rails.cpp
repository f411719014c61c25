#include "remote/job/rails.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "remote/io/guard.hpp"
#include "remote/job/work_counters.hpp"
#include "remote/limits.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"

namespace rig::remote {

namespace {

// `n` more bytes of the destination's next round are in place: whether that was the round's last.
bool round_placed(HeldRail& rail, std::uint64_t n) {
  rail.due_offset += n;
  if (rail.due_offset == rail.parts[rail.due_part].size()) {
    ++rail.due_part;
    rail.due_offset = 0;
  }
  if (rail.due_part < rail.parts.size()) return false;
  rail.due_part = 0;
  return true;
}

// The bytes one round of `rail` moves: every transfer's.
std::uint64_t round_bytes(const HeldRail& rail) {
  std::uint64_t n = 0;
  for (const auto& part : rail.parts) n += part.size();
  return n;
}

}  // namespace

Rails::Rails(Reactor& reactor, Events events) : reactor_(reactor), events_(std::move(events)) {}

Rails::~Rails() {
  *self_ = nullptr;
}

std::optional<std::string> Rails::add(std::uint32_t id, bool source, Connection& link,
                                      std::vector<std::span<std::byte>> parts,
                                      std::shared_ptr<const void> keep,
                                      std::shared_ptr<RailCounts> counts) {
  if (!counts) {
    auto taken = RailCounts::take();
    if (!taken) return "holds " + std::to_string(rails_max) + " rails already";
    counts = std::make_shared<RailCounts>(std::move(*taken));
  }
  auto rail = std::make_shared<HeldRail>();
  rail->id = id;
  rail->source = source;
  rail->link = &link;
  rail->parts = std::move(parts);
  rail->keep = std::move(keep);
  rail->counts = std::move(counts);
  if (source) rail->lane = link.direct_lane();
  if (raised_) rail->counts->raise();
  held_[id] = std::move(rail);
  return std::nullopt;
}

HeldRail* Rails::find(std::uint32_t id) {
  auto it = held_.find(id);
  return it == held_.end() ? nullptr : it->second.get();
}

void Rails::go(HeldRail& rail, std::uint64_t round, bool wait_ready, const std::string& who) {
  if (raised_) return;
  if (round != rail.started + 1) {
    return events_.fail(who + ": malformed message: RAIL_GO of round " + std::to_string(round) +
                        " of rail " + std::to_string(rail.id) + " where round " +
                        std::to_string(rail.started + 1) + " was due");
  }
  rail.started = round;
  // Rounds leave in order: one behind a round still waiting for RAIL_READY waits too.
  if ((wait_ready && rail.ready < round) || !rail.waiting_ready.empty()) {
    rail.waiting_ready.push_back(round);
    return release_ready(rail);
  }
  queue(rail, round);
}

void Rails::host_go(HeldRail& rail) {
  // Host code does not write a round itself meanwhile (write_round), so a round numbered and not
  // yet started here is the loop's to send unless host code wrote it already. It holds this only
  // for one non-blocking write.
  while (rail.writing.exchange(true, std::memory_order_seq_cst)) sched_yield();
  guard(
      [&] {
        catch_up(rail);
        const std::uint64_t upto = rail.numbered.load(std::memory_order_seq_cst);
        while (!raised_ && rail.started < upto) go(rail, rail.started + 1, false, "");
      },
      [&](const std::string& what) { events_.fail(what); });
  rail.writing.store(false, std::memory_order_seq_cst);
}

void Rails::catch_up(HeldRail& rail) {
  // Every round up to `direct` that the loop has not started is one host code wrote: host code
  // writes a round only once every round before it is with the link (write_round).
  const std::uint64_t direct = rail.direct.load(std::memory_order_acquire);
  while (!raised_ && rail.started < direct) {
    const std::uint64_t round = ++rail.started;
    WorkCounters::add(&WorkCounters::rail_rounds_sent, 1);
    WorkCounters::add(&WorkCounters::rail_bytes_sent, round_bytes(rail));
    if (events_.sent) events_.sent(rail, round);
  }
}

Rails::Written Rails::write_round(HeldRail& rail, std::span<std::uint8_t> message,
                                  std::size_t& rest_at, std::size_t& rest_end) noexcept {
  Written out;
  if (!rail.lane || !rail.source) return out;
  // The round's frames, as the loop cuts them (pump): per transfer, RAIL_CHUNK and RAIL_DATA.
  std::size_t need = 0;
  for (const auto& part : rail.parts) {
    need += rail_chunk_frame_bytes + frame_header_bytes + part.size();
  }
  if (need > message.size()) return out;
  if (rail.writing.exchange(true, std::memory_order_seq_cst)) return out;  // another is at it
  std::uint64_t before = rail.numbered.load(std::memory_order_seq_cst);
  // Only behind rounds all handed on: so nothing of this rail's is left for the loop to send, and
  // this round cannot pass one (the lane is free only while the link has nothing queued).
  if (rail.handed.load(std::memory_order_acquire) != before ||
      !rail.numbered.compare_exchange_strong(before, before + 1, std::memory_order_seq_cst)) {
    rail.writing.store(false, std::memory_order_seq_cst);
    return out;
  }
  out.round = before + 1;
  std::size_t at = 0;
  for (std::uint32_t i = 0; i < rail.parts.size(); ++i) {
    const std::span<std::byte> part = rail.parts[i];
    at += encode_into(RailChunk{rail.id, out.round, i, 0, 0}, message.subspan(at));
    write_frame_header(
        std::span<std::uint8_t, frame_header_bytes>(message.data() + at, frame_header_bytes),
        RailData::type, part.size());
    at += frame_header_bytes;
    std::memcpy(message.data() + at, part.data(), part.size());
    at += part.size();
  }
  struct Mark {
    HeldRail* rail;
    std::uint64_t round;
  } mark{&rail, out.round};
  // Before the first byte leaves: the destination's count of this round may come back to the loop
  // at once, and must find the round counted (catch_up, at on_count).
  const auto wrote = rail.lane->try_write(
      message.first(at),
      [](void* context) {
        const auto* m = static_cast<Mark*>(context);
        m->rail->direct.store(m->round, std::memory_order_release);
        m->rail->handed.store(m->round, std::memory_order_release);
      },
      &mark);
  rail.writing.store(false, std::memory_order_seq_cst);
  if (wrote.wrote == DirectLane::Wrote::none) {
    out.how = Written::How::posted;
    return out;
  }
  // The sources were copied into `message` before the write: they may be written again.
  rail.counts->sent().publish(out.round);
  if (wrote.wrote == DirectLane::Wrote::all) {
    out.how = Written::How::all;
    return out;
  }
  out.how = Written::How::part;
  rest_at = wrote.written;
  rest_end = at;
  return out;
}

void Rails::release_ready(HeldRail& rail) {
  // A round that needs no RAIL_READY waits only behind an earlier one that does.
  while (!rail.waiting_ready.empty() && rail.waiting_ready.front() <= rail.ready) {
    const std::uint64_t round = rail.waiting_ready.front();
    rail.waiting_ready.pop_front();
    queue(rail, round);
  }
  if (rail.waiting_ready.empty() && rail.ending) {
    outgoing_[rail.link].items.push_back({held_[rail.id], 0});
    pump(rail.link);
  }
}

void Rails::queue(HeldRail& rail, std::uint64_t round) {
  outgoing_[rail.link].items.push_back({held_[rail.id], round});
  pump(rail.link);
}

void Rails::end(HeldRail& rail) {
  if (rail.ending) return;
  catch_up(rail);
  rail.ending = true;
  if (!rail.waiting_ready.empty()) return;  // release_ready queues it after them
  outgoing_[rail.link].items.push_back({held_[rail.id], 0});
  pump(rail.link);
}

void Rails::say_ready(HeldRail& rail, std::uint64_t round) {
  if (raised_ || rail.link->state() != Connection::State::open) return;
  rail.link->send_soon(RailReady{rail.id, round});
}

void Rails::pump(Connection* link) {
  auto it = outgoing_.find(link);
  if (it == outgoing_.end()) return;
  Outgoing& o = it->second;
  if (o.pumping) return;
  o.pumping = true;
  // One write at a time is handed to the connection, the next once the kernel has taken it: a
  // message sent meanwhile waits behind at most one chunk's bytes. A write gathers rounds up to
  // chunk_bytes, so small rounds cost a system call per chunk's worth, not one each. A write
  // taken at once (the reader keeps up) has the next go on the loop's next turn, so that a round
  // of gigabytes does not keep the loop from this process's other sockets until its last byte.
  while (!raised_ && !o.items.empty() && link->state() == Connection::State::open && !o.in_flight) {
    Bytes owned;
    std::vector<Connection::Piece> pieces;
    std::vector<Outgoing::Item> finished;  // rounds whose last bytes this write carries
    std::size_t data = 0;
    while (!o.items.empty() && data < chunk_bytes && pieces.size() + 2 <= rail_write_pieces_max) {
      const Outgoing::Item item = o.items.front();
      HeldRail& rail = *item.rail;
      if (item.round == 0) {
        o.items.pop_front();
        const std::size_t at = owned.size();
        encode(RailEnd{rail.id}, owned);
        pieces.push_back({nullptr, at, owned.size() - at});
        if (events_.ended) events_.ended(rail);
        drop(rail.id);  // the write holds what it still sends from (item.rail's keep)
        finished.push_back(item);
        continue;
      }
      const std::span<std::byte> part = rail.parts[o.part];
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, part.size() - o.offset));
      // Chunks are cut as they always are; a write takes only whole ones, at most a chunk's worth.
      if (data != 0 && data + n > chunk_bytes) break;
      const std::size_t at = owned.size();
      // The controller waits for the arrival of the rounds it started: the destination reports
      // those at once.
      const std::uint8_t driven = item.round <= rail.driven ? 1 : 0;
      encode(RailChunk{rail.id, item.round, o.part, o.offset, driven}, owned);
      const std::size_t header = owned.size();
      owned.resize(header + frame_header_bytes);
      write_frame_header(
          std::span<std::uint8_t, frame_header_bytes>(owned.data() + header, frame_header_bytes),
          RailData::type, n);
      pieces.push_back({nullptr, at, owned.size() - at});
      pieces.push_back({reinterpret_cast<const std::uint8_t*>(part.data()) + o.offset, 0, n});
      data += n;
      o.offset += n;
      if (o.offset == part.size()) {
        ++o.part;
        o.offset = 0;
      }
      if (o.part == rail.parts.size()) {
        o.items.pop_front();
        o.part = 0;
        finished.push_back(item);
      }
    }
    // The link holds this write from here (its lane taken first): host code may write the next
    // round of these rails itself (write_round), which then goes behind it.
    link->hold_lane();
    for (const Outgoing::Item& item : finished) {
      if (item.round != 0) item.rail->handed.store(item.round, std::memory_order_release);
    }
    o.in_flight = true;  // cleared by written, which may run inside send_pieces
    link->send_pieces(std::move(owned), pieces,
                      [self = self_, link, finished = std::move(finished)] {
                        if (*self != nullptr) (*self)->written(link, finished);
                      });
    if (!o.in_flight && !o.items.empty()) {
      pump_soon(link, o);
      break;
    }
  }
  o.pumping = false;
}

void Rails::pump_soon(Connection* link, Outgoing& o) {
  if (o.pump_queued) return;
  o.pump_queued = true;
  reactor_.soon([self = self_, link] {
    Rails* rails = *self;
    if (rails == nullptr) return;
    auto it = rails->outgoing_.find(link);
    if (it == rails->outgoing_.end()) return;
    it->second.pump_queued = false;
    // Rounds queued on the link mean rails held over it, so the connection is still there.
    if (rails->raised_ || it->second.items.empty()) return;
    guard([&] { rails->pump(link); }, [&](const std::string& what) { rails->events_.fail(what); });
  });
}

void Rails::written(Connection* link, const std::vector<Outgoing::Item>& finished) {
  if (raised_) return;
  if (auto it = outgoing_.find(link); it != outgoing_.end()) it->second.in_flight = false;
  for (const Outgoing::Item& item : finished) {
    if (item.round == 0) continue;  // a RAIL_END
    item.rail->counts->sent().publish(item.round);
    WorkCounters::add(&WorkCounters::rail_rounds_sent, 1);
    WorkCounters::add(&WorkCounters::rail_bytes_sent, round_bytes(*item.rail));
    if (events_.sent) events_.sent(*item.rail, item.round);
  }
  pump(link);
}

HeldRail* Rails::held_on(Connection& from, std::uint32_t id, std::string_view message,
                         bool source) {
  HeldRail* rail = find(id);
  const std::string what = std::string(message) + " names rail " + std::to_string(id);
  if (rail == nullptr) {
    bad(from, what + ", which the job does not hold on this machine");
    return nullptr;
  }
  if (rail->source != source || rail->link != &from) {
    bad(from, what + ", of which this machine is not the " +
                  (source ? std::string("source") : std::string("destination")));
    return nullptr;
  }
  return rail;
}

void Rails::bad(Connection& from, const std::string& what) {
  events_.fail(from.peer_name() + ": malformed message: " + what);
}

void Rails::on_message(Connection& from, const Message& m) {
  if (raised_) return;
  if (const auto* r = std::get_if<RailReady>(&m)) return on_ready(from, *r);
  if (const auto* c = std::get_if<RailChunk>(&m)) return on_chunk(from, *c);
  if (const auto* n = std::get_if<RailCount>(&m)) return on_count(from, *n);
  if (const auto* e = std::get_if<RailEnd>(&m)) return on_end(from, *e);
}

void Rails::on_ready(Connection& from, const RailReady& m) {
  HeldRail* rail = held_on(from, m.rail, "RAIL_READY", true);
  if (rail == nullptr) return;
  if (m.round <= rail->ready) {
    return bad(from, "RAIL_READY for round " + std::to_string(m.round) + " of rail " +
                         std::to_string(m.rail) + " after round " + std::to_string(rail->ready));
  }
  rail->ready = m.round;
  release_ready(*rail);
}

void Rails::on_chunk(Connection& from, const RailChunk& m) {
  if (incoming_.count(&from) != 0) {
    return bad(from, "RAIL_CHUNK where the RAIL_DATA of the one before it was due");
  }
  HeldRail* rail = held_on(from, m.rail, "RAIL_CHUNK", false);
  if (rail == nullptr) return;
  const std::uint64_t due = rail->counts->arrived().get() + 1;
  if (m.round != due || m.part != rail->due_part || m.offset != rail->due_offset) {
    return bad(from, "RAIL_CHUNK of rail " + std::to_string(m.rail) + " round " +
                         std::to_string(m.round) + " transfer " + std::to_string(m.part) +
                         " offset " + std::to_string(m.offset) + " where round " +
                         std::to_string(due) + " transfer " + std::to_string(rail->due_part) +
                         " offset " + std::to_string(rail->due_offset) + " was due");
  }
  if (m.driven > 1) {
    return bad(from, "RAIL_CHUNK of rail " + std::to_string(m.rail) + " with driven " +
                         std::to_string(m.driven));
  }
  if (m.driven == 1) rail->driven = std::max(rail->driven, m.round);
  incoming_[&from] = Incoming{held_[m.rail], m.round};
}

std::span<std::uint8_t> Rails::sink(Connection& from, std::size_t bytes) {
  if (raised_) return {};
  auto it = incoming_.find(&from);
  if (it == incoming_.end()) return {};
  HeldRail& rail = *it->second.rail;
  const std::span<std::byte> part = rail.parts[rail.due_part];
  if (bytes == 0 || bytes > part.size() - rail.due_offset) return {};  // on_data says why
  return {reinterpret_cast<std::uint8_t*>(part.data()) + rail.due_offset, bytes};
}

void Rails::on_data(Connection& from, std::size_t bytes, const std::uint8_t* at) {
  if (raised_) return;
  auto it = incoming_.find(&from);
  if (it == incoming_.end()) return bad(from, "RAIL_DATA where no RAIL_CHUNK came before it");
  const Incoming in = std::move(it->second);
  incoming_.erase(it);
  HeldRail& rail = *in.rail;
  const std::span<std::byte> part = rail.parts[rail.due_part];
  const std::uint64_t room = part.size() - rail.due_offset;
  if (bytes == 0 || bytes > room) {
    return bad(from, "RAIL_DATA of " + std::to_string(bytes) + " bytes where " +
                         std::to_string(room) + " of transfer " + std::to_string(rail.due_part) +
                         " of rail " + std::to_string(rail.id) + " were due");
  }
  if (at != nullptr) std::memcpy(part.data() + rail.due_offset, at, bytes);
  if (!round_placed(rail, bytes)) return;
  // The round is in place: the word says so with release order, so a waiter that sees it sees
  // the bytes. Its sources were all read before its last byte left.
  rail.counts->arrive(in.round);
  report_arrival(rail, in.round);
}

void send_count(Connection& to, const HeldRail& rail, const RailCount& count, bool waited) {
  if (waited) {
    to.send_soon(count);
  } else if (count.value <= rail.driven) {
    to.send_later(count);
  } else {
    to.send_lazy(count);
  }
}

void Rails::report_arrival(HeldRail& rail, std::uint64_t round) {
  if (round <= rail.reported) return;
  WorkCounters::add(&WorkCounters::rail_rounds_arrived, round - rail.reported);
  WorkCounters::add(&WorkCounters::rail_bytes_arrived, (round - rail.reported) * round_bytes(rail));
  rail.reported = round;
  if (rail.link->state() == Connection::State::open) {
    // One count says every round before it arrived too. A source that is the controller waits for
    // it; a source agent's loop does not (it goes on once a round is sent).
    send_count(*rail.link, rail, RailCount{rail.id, RailCount::arrived, round}, rail.source_waits);
  }
  if (events_.arrived) events_.arrived(rail, round);
}

void Rails::let_host_read(HeldRail& rail) {
  if (rail.source || rail.read_lane) return;
  rail.read_lane = rail.link->read_lane();
  if (!rail.read_lane || !lane_links_.insert(rail.link).second) return;
  Connection* link = rail.link;
  rail.read_lane->on_request([self = self_](std::uint64_t id) {
    if (Rails* rails = *self; rails != nullptr && id <= UINT32_MAX) {
      guard([&] { rails->lend(static_cast<std::uint32_t>(id)); },
            [&](const std::string& what) { rails->events_.fail(what); });
    }
  });
  link->on_read_lane_watch([self = self_, link] {
    if (Rails* rails = *self) rails->readers_took(*link);
  });
}

void Rails::lend(std::uint32_t id) {
  auto it = held_.find(id);
  if (raised_ || it == held_.end()) return;
  HeldRail& rail = *it->second;
  // Not while the link's next frame is this rail's RAIL_DATA, which the loop reads.
  if (rail.source || !rail.read_lane || incoming_.count(rail.link) != 0) return;
  if (rail.read_lane->connection() != rail.link) return;  // the connection has closed
  if (!rail.link->lend_reads(id, it->second)) return;
  // Readers asleep on the count look again, and find the lane lent.
  rail.counts->arrived().nudge();
}

void Rails::readers_took(Connection& link) {
  if (raised_) return;
  for (auto& [id, rail] : held_) {
    if (rail->source || rail->link != &link || !rail->read_lane) continue;
    const std::uint64_t arrived = rail->counts->arrived().get();
    if (arrived != rail_count_raised) report_arrival(*rail, arrived);
  }
}

std::uint64_t Rails::wait_reading(const RailWord& word, ReadLane& lane, std::uint32_t id,
                                  std::uint64_t round) noexcept {
  for (;;) {
    const std::uint64_t now = word.get();
    if (now >= round) return now;
    if (void* holder = lane.claim(id)) {
      read_rounds(*static_cast<HeldRail*>(holder), lane, round);
      continue;
    }
    const std::uint32_t seen = word.seq.load(std::memory_order_seq_cst);
    lane.request(id);
    (void)word.wait_moved(round, seen);
  }
}

namespace {

std::uint32_t load_le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace

void Rails::read_rounds(HeldRail& rail, ReadLane& lane, std::uint64_t round) noexcept {
  // Only what is surely the rail's next bytes is taken here; anything else, malformed included,
  // goes back to the loop untouched, which handles it (and names what is wrong) as ever.
  bool give_back = false;
  try {
    for (;;) {
      const std::uint64_t arrived = rail.counts->arrived().get();
      if (arrived >= round) break;  // a raised count too
      const std::uint8_t* p = lane.data();
      const std::size_t have = lane.size();
      if (have >= rail_count_frame_bytes && p[frame_length_field_bytes] == RailCount::type &&
          frame_length_field_bytes + load_le32(p) == rail_count_frame_bytes) {
        // The other end's count of a rail this end sends on: the loop's, and it may wait for the
        // loop's next look (within read_lane_watch_ms). Each end's count rides in front of its
        // next round, so giving the lane back for it would cost a hand-over every round.
        lane.defer(rail_count_frame_bytes);
        continue;
      }
      if (have >= frame_header_bytes) {
        if (p[frame_length_field_bytes] != RailChunk::type ||
            frame_length_field_bytes + load_le32(p) != rail_chunk_frame_bytes) {
          give_back = true;
          break;
        }
      }
      if (have < rail_chunk_frame_bytes + frame_header_bytes) {
        if (lane.read_more(read_lane_read_bytes) != ReadLane::Read::bytes) {
          give_back = true;
          break;
        }
        continue;
      }
      const auto message = decode(Frame{
          RailChunk::type, {p + frame_header_bytes, rail_chunk_frame_bytes - frame_header_bytes}});
      const auto* chunk = message ? std::get_if<RailChunk>(&*message) : nullptr;
      const std::uint8_t* data = p + rail_chunk_frame_bytes;
      const std::uint32_t data_length = load_le32(data);
      if (chunk == nullptr || chunk->rail != rail.id || chunk->driven != 0 ||
          chunk->round != arrived + 1 || chunk->part != rail.due_part ||
          chunk->offset != rail.due_offset || data[frame_length_field_bytes] != RailData::type ||
          data_length < 2) {
        give_back = true;
        break;
      }
      const std::span<std::byte> part = rail.parts[rail.due_part];
      const std::size_t n = data_length - 1;
      if (n > part.size() - rail.due_offset) {
        give_back = true;
        break;
      }
      lane.consume(rail_chunk_frame_bytes + frame_header_bytes);
      auto* to = reinterpret_cast<std::uint8_t*>(part.data()) + rail.due_offset;
      std::size_t placed = std::min(n, lane.size());
      std::memcpy(to, lane.data(), placed);
      lane.consume(placed);
      while (placed < n) {
        std::size_t got = 0;
        // Cut off inside a body: the socket ended (the loop's read finds it so), or the loop wants
        // it back because the connection ends, which discards what follows anyway.
        if (lane.read_into({to + placed, n - placed}, got) != ReadLane::Read::bytes) {
          lane.release(true);
          return;
        }
        placed += got;
      }
      if (!round_placed(rail, n)) continue;
      // As on_data: the bytes are in place before the count says so. The loop reports it. The
      // round may be the answer to one the loop sent: that write is seen done first.
      lane.after_loop_writes();
      rail.counts->arrive(chunk->round);
      WorkCounters::add(&WorkCounters::rail_rounds_host_read, 1);
    }
  } catch (...) {
    give_back = true;  // no memory for the reader's bytes: the loop reads on
  }
  lane.release(give_back);
}

void Rails::on_count(Connection& from, const RailCount& m) {
  // The destination's count for the last round may cross the RAIL_END this source passed on.
  if (find(m.rail) == nullptr && passed_on_.count(m.rail) != 0) return;
  HeldRail* rail = held_on(from, m.rail, "RAIL_COUNT", true);
  if (rail == nullptr) return;
  catch_up(*rail);
  if (m.which != RailCount::arrived || m.value > rail->started) {
    return bad(from, "RAIL_COUNT " + std::to_string(m.which) + " of " + std::to_string(m.value) +
                         " for rail " + std::to_string(m.rail) + ", of which " +
                         std::to_string(rail->started) + " rounds have started");
  }
  rail->counts->arrive(m.value);
}

void Rails::on_end(Connection& from, const RailEnd& m) {
  HeldRail* rail = held_on(from, m.rail, "RAIL_END", false);
  if (rail == nullptr) return;
  if (auto it = incoming_.find(&from); it != incoming_.end()) {
    return bad(from, "RAIL_END where the RAIL_DATA of a RAIL_CHUNK was due");
  }
  if (rail->due_part != 0 || rail->due_offset != 0) {
    return bad(from, "RAIL_END of rail " + std::to_string(m.rail) + " inside a round");
  }
  // Rounds host code read itself and the watch has not reported yet.
  report_arrival(*rail, rail->counts->arrived().get());
  if (events_.ended) events_.ended(*rail);
  drop(m.rail);
}

void Rails::drop(std::uint32_t id) {
  if (auto it = held_.find(id); it != held_.end() && it->second->source) passed_on_.insert(id);
  held_.erase(id);
}

void Rails::raise_all() noexcept {
  raised_ = true;
  for (auto& [id, rail] : held_) rail->counts->raise();
  // A reader asleep on the socket wakes and gives it back (its count reads raised).
  for (auto& [id, rail] : held_) {
    if (rail->read_lane) rail->read_lane->want_back();
  }
  incoming_.clear();
  for (auto& [link, o] : outgoing_) o.items.clear();
}

}  // namespace rig::remote
