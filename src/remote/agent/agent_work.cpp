#include "remote/agent/agent_work.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/device.hpp"
#include "core/spin.hpp"
#include "remote/io/guard.hpp"
#include "remote/job/work_counters.hpp"
#include "remote/limits.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/printable.hpp"
#include "rig/program.hpp"

namespace rig::remote {

namespace {

// The poll of a device's timeline after giving it work (remote/limits.hpp says why its default).
std::int64_t completion_poll_us() {
  static const auto us =
      static_cast<std::int64_t>(rig::detail::read_tunable(agent_poll_us_tunable));
  return us;
}

std::string_view name_of(const Message& m) {
  return std::visit([](const auto& x) { return x.name; }, m);
}

// A program's pieces as one: each piece is let go once copied, so that the whole is held about
// once (the reserve touches no page ahead of the copies).
std::vector<std::byte> joined(std::vector<std::vector<std::byte>> pieces) {
  if (pieces.size() == 1) return std::move(pieces.front());
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  std::vector<std::byte> out;
  out.reserve(total);
  for (auto& p : pieces) {
    out.insert(out.end(), p.begin(), p.end());
    std::vector<std::byte>().swap(p);
  }
  return out;
}

// The bytes of `b` that this process may read and write itself, with no copy by its device
// (Driver::direct_access), or none. Asked only at a copy's turn, once the work before it has run:
// a host buffer's access() waits, on the loop, for work that uses the buffer.
std::span<std::byte> direct_bytes(const Buffer& b) {
  if (b.device() == rig::host()) return b.access();
  const auto& core = b.core();
  if (rig::failure(b.device()) || !core->device()->driver().direct_access()) return {};
  try {
    return {core->data(), b.size()};
  } catch (const std::invalid_argument&) {
    return {};  // its device has closed: the copy's turn says so
  }
}

}  // namespace

// The helper thread: runs the calls AgentWork hands it, one at a time, and wakes the loop once each
// has returned. Owner: shared by the agent's work and the thread, which may outlive the job while
// a call runs on (it then only returns, dropping what the call captured). Threads: both, under
// `mu`.
struct Helper {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> call;  // the next call; empty once the thread has taken it
  bool returned = false;       // the last call has returned: the loop's to collect
  bool quit = false;
  uv_async_t* async = nullptr;

  static void run(std::shared_ptr<Helper> h, std::optional<sigset_t> mask) {
    pthread_setname_np(pthread_self(), "rig-helper");
    // Openers run here as the program's own code: with the signal mask serve was called with.
    if (mask) pthread_sigmask(SIG_SETMASK, &*mask, nullptr);
    std::unique_lock lock(h->mu);
    for (;;) {
      h->cv.wait(lock, [&] { return h->quit || h->call; });
      if (h->quit) return;
      std::function<void()> call = std::move(h->call);
      h->call = nullptr;
      lock.unlock();
      call();
      call = nullptr;  // what it captured goes here, off the loop
      lock.lock();
      // The async handle closes with the job: it must not be touched once the job has let go.
      if (h->quit) return;
      h->returned = true;
      uv_async_send(h->async);
    }
  }
};

AgentWork::AgentWork(Reactor& reactor, const std::vector<std::pair<std::string, Opener>>& kinds,
                     Fail fail, std::optional<sigset_t> program_signals)
    : reactor_(reactor),
      kinds_(kinds),
      fail_(std::move(fail)),
      program_signals_(program_signals),
      rails_(
          reactor, [this](const std::string& cause) { this->fail(cause); }, [this] { pump(); }) {
  devices_[0] = rig::host();
  uv_idle_init(reactor_.loop(), &idle_);
  idle_.data = this;
  uv_async_init(reactor_.loop(), &async_, on_async);
  async_.data = this;
}

AgentWork::~AgentWork() {
  *self_ = nullptr;
  if (helper_) {
    std::lock_guard lock(helper_->mu);
    helper_->quit = true;
    helper_->cv.notify_all();
  }
}

void AgentWork::shut() {
  if (shut_) return;
  shut_ = true;
  rails_.shut();
  running_.reset();
  queue_.clear();
  // A call still running on the helper thread returns there; its result is dropped.
  then_ = nullptr;
  closing_ = nullptr;
  if (helper_) {
    // The thread must not touch the async handle once it is closing.
    std::lock_guard lock(helper_->mu);
    helper_->quit = true;
    helper_->call = nullptr;
    helper_->cv.notify_all();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&idle_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
}

void AgentWork::device_lost(const std::string& cause) {
  if (WorkCounters* c = work_counters()) c->device_lost.store(1, std::memory_order_relaxed);
  fail(cause);
}

void AgentWork::fail(const std::string& cause) {
  if (shut_) return;
  // A refusal of this machine's rig may quote the controller's bytes (a run's entry name).
  fail_(printable_once(cause));
}

Device* AgentWork::device(std::uint32_t id, std::string_view message) {
  auto it = devices_.find(id);
  if (it != devices_.end()) return &it->second;
  fail(std::string(message) + " names device " + std::to_string(id) +
       ", which the job has not opened on this machine");
  return nullptr;
}

Buffer* AgentWork::memory(std::uint64_t id, std::string_view message) {
  auto it = memory_.find(id);
  if (it != memory_.end()) return &it->second;
  fail(std::string(message) + " names memory " + std::to_string(id) +
       ", which the job does not hold on this machine");
  return nullptr;
}

// ---- StagingCache

Buffer StagingCache::take(std::size_t bytes) {
  const auto it = free_.lower_bound(bytes);
  if (it != free_.end() && it->first / 2 <= bytes) {
    Buffer b = std::move(it->second);
    cached_bytes_ -= it->first;
    free_.erase(it);
    return b;
  }
  return Buffer::make(rig::host(), bytes);
}

void StagingCache::give_back(Buffer b) {
  if (b.size() > staging_cache_bytes_max) return;  // freed as it goes
  // The buffer just used is the likeliest to serve the next copy (a stream of copies of one size):
  // smaller kept ones make room for it, smallest first, as they are the cheapest to make again.
  while (cached_bytes_ + b.size() > staging_cache_bytes_max) {
    cached_bytes_ -= free_.begin()->first;
    free_.erase(free_.begin());
  }
  cached_bytes_ += b.size();
  free_.emplace(b.size(), std::move(b));
}

void StagingCache::clear() {
  free_.clear();
  cached_bytes_ = 0;
}

std::vector<std::size_t> back_pieces(std::uint64_t bytes) {
  std::vector<std::size_t> pieces;
  if (bytes < 2 * back_piece_bytes_first) {
    if (bytes > 0) pieces.push_back(static_cast<std::size_t>(bytes));
    return pieces;
  }
  std::uint64_t piece = back_piece_bytes_first;
  for (std::uint64_t done = 0; done < bytes; done += pieces.back()) {
    pieces.push_back(static_cast<std::size_t>(std::min(piece, bytes - done)));
    piece = std::min<std::uint64_t>(piece * 2, staging_piece_bytes_early);
  }
  return pieces;
}

// ---- AgentWork

void AgentWork::message(Message&& m) {
  if (shut_) return;
  if (receiving_) {
    return fail("controller: malformed message: " + std::string(name_of(m)) +
                " before the PAYLOAD bytes of the message before it");
  }
  if (closing_) {
    return fail("controller: malformed message: " + std::string(name_of(m)) + " after CLOSE");
  }
  Op op;
  if (const auto* s = std::get_if<Submit>(&m)) {
    // Copies from the controller's memory: their bytes follow as PAYLOAD, staged as they come
    // until the submission's turn (earlier work may still use the destination).
    for (const WirePart& p : s->parts) {
      if (p.kind != WirePart::copy || p.src != 0 || p.bytes == 0) continue;
      Staged staged;
      staged.bytes = p.bytes;
      staged.dst = p.dst;
      staged.dst_offset = p.dst_offset;
      op.staged.push_back(std::move(staged));
    }
  } else if (const auto* l = std::get_if<Load>(&m)) {
    if (l->bytes > program_bytes_max) {
      return fail("controller: malformed message: LOAD of " + std::to_string(l->bytes) +
                  " bytes, over the maximum " + std::to_string(program_bytes_max));
    }
    op.program_due = l->bytes;
  }
  op.message = std::move(m);
  receiving_ = !op.complete();
  queue_.push_back(std::move(op));
  pump();
}

std::optional<std::string> AgentWork::room_for_bytes(Op& op, Staged& s) {
  if (!s.pieces.empty() && s.last_filled < s.pieces.back().second) return std::nullopt;
  std::uint64_t piece = std::min<std::uint64_t>(
      s.bytes - s.received, std::max<std::uint64_t>(staging_piece_bytes_min, s.received));
  if (op.early) {
    piece = std::min<std::uint64_t>(s.bytes - s.received, staging_piece_bytes_early);
    // Pieces whose copies are done serve again (a copy of a gigabyte cycles through a few).
    const Device& d = devices_[std::get<Submit>(op.message).device];
    while (op.handed_done < op.handed.size() && d.reached() >= op.handed[op.handed_done].first) {
      staging_->give_back(std::move(op.handed[op.handed_done++].second));
    }
    if (op.handed_done == op.handed.size()) {
      op.handed.clear();
      op.handed_done = 0;
    }
  }
  try {
    s.pieces.emplace_back(staging_->take(static_cast<std::size_t>(piece)),
                          static_cast<std::size_t>(piece));
  } catch (const std::exception& e) {
    return std::string("cannot stage a copy from the controller: ") + e.what();
  }
  s.last_filled = 0;
  return std::nullopt;
}

void AgentWork::place_early(Op& op) {
  // Decided once, at the first byte: bytes a sink took into a staging piece before the op's turn
  // came are counted only when their frame is whole, and must not then be taken as placed.
  op.placing_decided = true;
  const auto* m = std::get_if<Submit>(&op.message);
  if (m == nullptr || queue_.size() != 1 || &queue_.front() != &op || running_ || then_ ||
      rails_.holds(op.message)) {
    return;
  }
  const auto d = devices_.find(m->device);
  if (d == devices_.end() || rig::failure(d->second) || !rig::reaches(d->second, rig::host())) {
    return;
  }
  // Anything the copies' turn could refuse is left to it (rig::submit says why, in its words).
  bool other_part = false;
  for (const WirePart& p : m->parts) {
    if (p.kind == WirePart::copy && p.bytes == 0) continue;
    if (p.kind != WirePart::copy || p.src != 0) {
      other_part = true;
      continue;
    }
    if (other_part || p.dst == 0) return;
    const auto b = memory_.find(p.dst);
    if (b == memory_.end() || p.dst_offset > b->second.size() ||
        p.bytes > b->second.size() - p.dst_offset) {
      return;
    }
    const Device& owner = b->second.device();
    if (rig::failure(owner) || (owner != d->second && !rig::reaches(d->second, owner))) return;
  }
  op.early = true;
  for (Staged& s : op.staged) {
    // The work before has run (the checks above), so the destination is the copy's alone: host
    // memory, or a device's the process addresses itself, takes the bytes straight from the socket.
    const auto bytes = direct_bytes(memory_.at(s.dst));
    if (bytes.empty()) continue;
    s.direct =
        bytes.subspan(static_cast<std::size_t>(s.dst_offset), static_cast<std::size_t>(s.bytes));
  }
}

void AgentWork::hand_piece(Op& op, Staged& s) {
  auto [piece, length] = std::move(s.pieces.back());
  s.pieces.pop_back();
  s.last_filled = 0;
  const auto& m = std::get<Submit>(op.message);
  Copy one;
  one.src = piece;
  one.dst = memory_.at(s.dst);
  one.dst_offset = static_cast<std::size_t>(s.dst_offset + s.handed);
  one.bytes = length;
  s.handed += length;
  try {
    const Part part{std::move(one)};
    op.early_value = rig::submit(devices_[m.device], std::span<const Part>(&part, 1));
  } catch (const std::exception& e) {
    return fail(e.what());  // as the SUBMIT's own turn would have
  }
  op.handed.emplace_back(op.early_value, std::move(piece));
}

std::span<std::uint8_t> AgentWork::payload_sink(std::size_t bytes) {
  if (shut_ || !receiving_) return {};
  Op& op = queue_.back();
  // A program's piece is made only once its bytes are here: no sink for it.
  if (op.complete() || op.program_due > 0) return {};
  if (!op.placing_decided) place_early(op);
  Staged& s = op.staged[op.staging];
  if (!s.direct.empty()) {
    if (s.bytes - s.received < bytes) return {};  // runs across copies: payload()
    return {reinterpret_cast<std::uint8_t*>(s.direct.data()) + s.received, bytes};
  }
  // A piece that cannot be taken now fails the job from payload(), which tries again.
  if (room_for_bytes(op, s)) return {};
  auto& [buffer, length] = s.pieces.back();
  if (length - s.last_filled < bytes) return {};  // runs across pieces or copies: payload()
  return {reinterpret_cast<std::uint8_t*>(buffer.access().data()) + s.last_filled, bytes};
}

void AgentWork::payload(std::size_t bytes, const std::uint8_t* from) {
  if (shut_) return;
  if (!receiving_) return fail("controller: malformed message: PAYLOAD where none was due");
  Op& op = queue_.back();
  if (op.program_due > 0 && bytes > 0) {
    assert(from != nullptr);  // a program's bytes are never placed by a sink (payload_sink)
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, op.program_due));
    const auto* at = reinterpret_cast<const std::byte*>(from);
    try {
      op.program.emplace_back(at, at + n);
    } catch (const std::bad_alloc&) {
      return fail("cannot hold a program of " + std::to_string(std::get<Load>(op.message).bytes) +
                  " bytes");
    }
    op.program_due -= n;
    from += n;
    bytes -= n;
  }
  while (bytes > 0) {
    if (op.complete()) {
      return fail("controller: malformed message: PAYLOAD beyond the bytes of its " +
                  std::string(name_of(op.message)));
    }
    if (!op.placing_decided) place_early(op);
    Staged& s = op.staged[op.staging];
    if (!s.direct.empty()) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(bytes, s.bytes - s.received));
      if (from != nullptr) {
        std::memcpy(s.direct.data() + s.received, from, n);
        from += n;
      }
      bytes -= n;
      s.received += n;
      if (s.received == s.bytes) ++op.staging;
      continue;
    }
    if (auto why = room_for_bytes(op, s)) return fail(*why);
    auto& [buffer, length] = s.pieces.back();
    const std::size_t n = std::min(bytes, length - s.last_filled);
    if (from != nullptr) {
      std::memcpy(buffer.access().data() + s.last_filled, from, n);
      from += n;
    }
    bytes -= n;
    s.last_filled += n;
    s.received += n;
    if (s.received == s.bytes) ++op.staging;
    if (op.early && s.last_filled == length) {
      hand_piece(op, s);
      if (shut_) return;
    }
  }
  if (op.complete()) {
    receiving_ = false;
    pump();
  }
}

void AgentWork::pump() {
  // A message's application may finish within itself (a rail round the kernel takes at once) and
  // ask for the next: the loop below takes it, once the one it applies has returned.
  if (pumping_) return;
  pumping_ = true;
  // The staging cache's idle time counts from the end of the last pump that applied a message:
  // one clock reading per pump rather than one per message of a pipelined burst.
  struct Done {
    AgentWork& work;
    bool applied = false;
    ~Done() {
      work.pumping_ = false;
      if (applied) work.last_work_ms_ = work.reactor_.now_ms();
    }
  } done_pumping{*this};
  while (!shut_ && !running_ && !then_ && !queue_.empty() &&
         !rails_.holds(queue_.front().message)) {
    if (receiving_ && queue_.size() == 1) return;  // its bytes are still coming
    Op op = std::move(queue_.front());
    queue_.pop_front();
    done_pumping.applied = true;
    apply(op);
  }
  if (!shut_ && closing_ && idle()) {
    release();
    std::function<void()> done = std::move(closing_);
    closing_ = nullptr;
    done();
  }
}

void AgentWork::off_loop(std::function<void()> call, std::function<void()> then) {
  assert(!then_);  // one call at a time: the work waits for it
  if (!helper_) {
    auto helper = std::make_shared<Helper>();
    helper->async = &async_;
    std::thread(Helper::run, helper, program_signals_).detach();
    helper_ = std::move(helper);
  }
  then_ = std::move(then);
  std::lock_guard lock(helper_->mu);
  helper_->call = std::move(call);
  helper_->cv.notify_all();
}

void AgentWork::helper_returned() {
  if (shut_) return;
  {
    std::lock_guard lock(helper_->mu);
    if (!helper_->returned) return;
    helper_->returned = false;
  }
  std::function<void()> then = std::move(then_);
  then_ = nullptr;
  if (then) then();
  pump();
}

void AgentWork::apply(Op& op) {
  Message& m = op.message;
  if (const auto* s = std::get_if<Submit>(&m)) {
    return submit(*s, op);
  }
  if (const auto* o = std::get_if<Open>(&m)) return open(*o);
  if (const auto* r = std::get_if<RailMake>(&m)) return rails_.make(*r, memory_);
  if (const auto* g = std::get_if<RailGo>(&m)) return rails_.go(*g);
  if (const auto* e = std::get_if<RailExpect>(&m)) return rails_.expect(*e);
  if (const auto* a = std::get_if<RailAwait>(&m)) return rails_.await(*a);
  if (const auto* n = std::get_if<RailEnd>(&m)) return rails_.end(*n);
  if (const auto* k = std::get_if<Make>(&m)) return make(*k);
  if (const auto* l = std::get_if<Load>(&m)) return load(*l, op);
  if (const auto* f = std::get_if<Free>(&m)) {
    if (const Buffer* b = memory(f->memory, "FREE")) {
      WorkCounters::memory_freed(b->device().name(), b->size());
      memory_.erase(f->memory);
    }
    return;
  }
  if (const auto* u = std::get_if<Unload>(&m)) {
    if (images_.erase(u->image) == 0) {
      fail("UNLOAD names program image " + std::to_string(u->image) +
           ", which the job does not hold on this machine");
    }
    return;
  }
}

void AgentWork::open(const Open& m) {
  Opened answer;
  if (auto known = opened_.find(m.kind); known != opened_.end()) {
    for (std::uint32_t id : known->second) {
      const Device& d = devices_[id];
      answer.devices.push_back({id, d.name(), d.arch(), d.budget()});
    }
    controller_->send(answer);
    return;
  }
  const Opener* opener = nullptr;
  for (const auto& [kind, fn] : kinds_) {
    if (kind == m.kind) opener = &fn;
  }
  if (opener == nullptr) {
    answer.why = "serves no devices of kind " + printable(m.kind);
    controller_->send(answer);
    return;
  }
  // The opener may take long (a CUDA start-up, say): it runs on the helper thread, as the
  // program's own code. What it returns or throws comes back here.
  struct Opening {
    std::optional<Result<std::vector<Device>>> got;
    std::string threw;
  };
  auto opening = std::make_shared<Opening>();
  off_loop(
      [opening, opener = *opener, kind = m.kind] {
        try {
          opening->got = opener();
        } catch (const std::exception& e) {
          opening->threw = e.what();  // an opener's exception is the job's root cause, as it reads
        } catch (...) {
          opening->threw =
              "the opener of kind " + kind + " threw an exception not derived from std::exception";
        }
      },
      [this, opening, kind = m.kind] { opened(kind, std::move(opening->got), opening->threw); });
}

void AgentWork::opened(const std::string& kind, std::optional<Result<std::vector<Device>>> got,
                       const std::string& threw) {
  if (!got) return fail(threw);
  Opened answer;
  if (!*got) {
    answer.why = got->error();
    controller_->send(answer);
    return;
  }
  std::vector<std::uint32_t> ids;
  for (const Device& d : **got) {
    const std::uint32_t id = next_device_++;
    devices_[id] = d;
    ids.push_back(id);
    WorkCounters::device_opened(d.name());
    answer.devices.push_back({id, d.name(), d.arch(), d.budget()});
  }
  // Reach between the new devices and every device the job holds here, both ways.
  for (std::uint32_t id : ids) {
    for (const auto& [other, d] : devices_) {
      if (other == id) continue;
      if (rig::reaches(devices_[id], d)) answer.reaches.push_back({id, other});
      const bool other_is_new = std::find(ids.begin(), ids.end(), other) != ids.end();
      if (!other_is_new && rig::reaches(d, devices_[id])) answer.reaches.push_back({other, id});
    }
  }
  opened_[kind] = std::move(ids);
  controller_->send(answer);
}

void AgentWork::make(const Make& m) {
  Device* d = device(m.device, "MAKE");
  if (d == nullptr) return;
  // A make may take long (a device's first allocation, a large one pinned): off the loop.
  struct Making {
    std::optional<Buffer> buffer;
    std::string short_of;  // the device's OutOfMemory: an answer, not a failure
    std::string threw;
  };
  auto making = std::make_shared<Making>();
  off_loop(
      [making, device = *d, bytes = m.bytes] {
        try {
          making->buffer = Buffer::make(device, bytes);
        } catch (const OutOfMemory& e) {
          making->short_of = clamp_reason(e.what());
        } catch (const std::exception& e) {
          making->threw = e.what();
        } catch (...) {
          making->threw = "unknown exception";
        }
      },
      [this, making] {
        if (!making->threw.empty()) return fail(making->threw);
        if (!making->buffer) return controller_->send(Made{0, making->short_of});
        const std::uint64_t id = next_memory_++;
        WorkCounters::memory_made(making->buffer->device().name(), making->buffer->size());
        memory_.emplace(id, std::move(*making->buffer));
        controller_->send(Made{id, ""});
      });
}

void AgentWork::load(const Load& m, Op& op) {
  Device* d = device(m.device, "LOAD");
  if (d == nullptr) return;
  // A load may take long (a PTX JIT): off the loop.
  struct Loading {
    std::optional<Image> image;
    std::string why;  // the program or the load refused: an answer, not a failure
    std::string threw;
  };
  auto loading = std::make_shared<Loading>();
  off_loop(
      [loading, device = *d, pieces = std::move(op.program)]() mutable {
        try {
          auto program = Program::parse(joined(std::move(pieces)));
          if (!program) {
            loading->why = clamp_reason(program.error());
            return;
          }
          auto image = rig::load(device, *program);
          if (!image) {
            loading->why = clamp_reason(image.error());
            return;
          }
          loading->image = std::move(*image);
        } catch (const std::exception& e) {
          loading->threw = e.what();
        } catch (...) {
          loading->threw = "unknown exception";
        }
      },
      [this, loading] {
        if (!loading->threw.empty()) return fail(loading->threw);
        Loaded answer;
        answer.why = loading->why;
        if (loading->image) {
          answer.image = next_image_++;
          images_.emplace(answer.image, std::move(*loading->image));
        }
        controller_->send(answer);
      });
}

void AgentWork::submit(const Submit& m, Op& op) {
  Device* d = device(m.device, "SUBMIT");
  if (d == nullptr) return;
  Running run{.device = *d, .device_id = m.device, .value = m.value};
  std::vector<Part> parts;
  parts.reserve(m.parts.size());
  std::size_t staged = 0;
  // A SUBMIT of nothing but copies into the controller's memory from memory this process
  // addresses (host memory, a SIM device's) is written from where that memory lies
  // (send_from_memory): no copy into staging first.
  if (send_from_memory(m) || send_in_pieces(m)) return;
  for (const WirePart& p : m.parts) {
    if (p.kind == WirePart::copy) {
      if (p.bytes == 0) continue;  // checked by the controller, nothing to move
      if (p.src == 0 && p.dst == 0) {
        return fail(
            "controller: malformed message: SUBMIT copies from the controller's memory to itself");
      }
      if (p.src == 0) {
        // Staged in pieces as the bytes came: one copy per piece, each to its place, so that no
        // copy of the whole is made first (a second pass over gigabytes, and fresh pages).
        Buffer* b = memory(p.dst, "SUBMIT");
        if (b == nullptr) return;
        // What came before its turn is in place already (place_early): only the rest is copied.
        Staged& s = op.staged[staged++];
        std::size_t at = static_cast<std::size_t>(p.dst_offset + s.handed);
        for (auto& [piece, length] : s.pieces) {
          Copy one;
          one.src = piece;
          one.dst = *b;
          one.dst_offset = at;
          one.bytes = length;
          at += length;
          parts.emplace_back(std::move(one));
        }
        continue;
      }
      Copy c;
      c.bytes = p.bytes;
      Buffer* src = memory(p.src, "SUBMIT");
      if (src == nullptr) return;
      c.src = *src;
      c.src_offset = p.src_offset;
      if (p.dst == 0) {
        try {
          run.back.push_back({0, staging_->take(p.bytes), p.bytes});
        } catch (const std::exception& e) {
          return fail(std::string("cannot stage a copy to the controller: ") + e.what());
        }
        c.dst = run.back.back().staging;
      } else {
        Buffer* b = memory(p.dst, "SUBMIT");
        if (b == nullptr) return;
        c.dst = *b;
        c.dst_offset = p.dst_offset;
      }
      parts.emplace_back(std::move(c));
      continue;
    }
    if (p.kind != WirePart::run) {
      return fail("controller: malformed message: SUBMIT part kind " + std::to_string(p.kind));
    }
    auto image = images_.find(p.image);
    if (image == images_.end()) {
      return fail("SUBMIT names program image " + std::to_string(p.image) +
                  ", which the job does not hold on this machine");
    }
    Run r;
    r.image = image->second;
    r.entry.assign(p.entry.data(), p.entry.size());
    for (int i = 0; i < 3; ++i) {
      r.shape.grid[i] = p.shape[i];
      r.shape.block[i] = p.shape[3 + i];
    }
    for (const WireArg& a : p.args) {
      if (a.memory == 0) {
        r.args.push_back(Arg::word(a.word));
        continue;
      }
      if (a.access == WireArg::rail) {
        const auto word = rails_.record_word(a.memory);
        if (!word) {
          return fail("SUBMIT names rail " + std::to_string(a.memory) +
                      ", which the job does not hold on this machine");
        }
        r.args.push_back(Arg::word(*word));
        continue;
      }
      if (a.access > static_cast<std::uint8_t>(Access::read_write)) {
        return fail("controller: malformed message: SUBMIT argument access " +
                    std::to_string(a.access));
      }
      Buffer* b = memory(a.memory, "SUBMIT");
      if (b == nullptr) return;
      r.args.push_back(Arg{Arg::Mem{*b, static_cast<Access>(a.access), a.offset}});
    }
    parts.emplace_back(std::move(r));
  }
  const bool placed = op.early;
  if (parts.empty() && op.early_value == 0) {
    // Nothing to run (or only bytes read into place): every earlier message's work is done, so
    // the value is reached now. A batch of such messages read at once is answered in one write,
    // by one REACHED (reached()).
    if (placed) count_submission(m);
    reached(m.device, m.value);
    return;
  }
  run.local_value = op.early_value;
  if (!parts.empty()) {
    try {
      run.local_value = rig::submit(*d, parts);
    } catch (const std::exception& e) {
      return fail(e.what());  // refused by this machine's rig, out of memory, or a lost device
    }
    // The copies into the controller's memory go back once all of the work is done.
    for (Running::BackPiece& piece : run.back) piece.local_value = run.local_value;
  }
  count_submission(m);
  for (Staged& st : op.staged) {
    for (auto& piece : st.pieces) run.staged.push_back(std::move(piece.first));
  }
  for (std::size_t i = op.handed_done; i < op.handed.size(); ++i) {
    run.staged.push_back(std::move(op.handed[i].second));
  }
  running_ = std::move(run);
  check_running();
  if (running_) watch();
}

bool AgentWork::send_from_memory(const Submit& m) {
  const Device& d = devices_[m.device];
  if (!rig::reaches(d, rig::host())) return false;
  Bytes owned;
  rig::detail::PoolVector<Connection::Piece> pieces;
  std::vector<Buffer>
      sources;  // held by the write: the job may end and free them before it is done
  for (const WirePart& p : m.parts) {
    if (p.kind == WirePart::copy && p.bytes == 0) continue;
    // Anything else, or anything the SUBMIT's own turn would refuse, takes that turn.
    const Buffer* src = copy_back_source(p);
    if (src == nullptr) return false;
    // The work before has run (the SUBMIT's turn), so these are the bytes the copy would read:
    // of host memory, or of a device's that the process addresses itself.
    const auto whole = direct_bytes(*src);
    if (whole.empty()) return false;
    const auto bytes =
        whole.subspan(static_cast<std::size_t>(p.src_offset), static_cast<std::size_t>(p.bytes));
    add_bulk_frames(owned, pieces, Data::type,
                    {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
    sources.push_back(*src);
  }
  if (pieces.empty()) return false;
  // Until the write is done its bytes are read from the job's memory: the work stays running, so
  // that nothing later changes that memory meanwhile; REACHED follows at its end.
  running_ = Running{.device = d, .device_id = m.device, .value = m.value};
  running_->writes_from_memory = 1;
  count_submission(m);
  controller_->send_pieces(std::move(owned), pieces, [self = self_, sources = std::move(sources)] {
    AgentWork* work = *self;
    if (work == nullptr || work->shut_ || !work->running_) return;
    --work->running_->writes_from_memory;
    work->check_running();
  });
  return true;
}

const Buffer* AgentWork::copy_back_source(const WirePart& p) const {
  if (p.kind != WirePart::copy || p.dst != 0 || p.src == 0) return nullptr;
  const auto src = memory_.find(p.src);
  if (src == memory_.end() || p.src_offset > src->second.size() ||
      p.bytes > src->second.size() - p.src_offset) {
    return nullptr;
  }
  return &src->second;
}

bool AgentWork::send_in_pieces(const Submit& m) {
  const WirePart* copy = nullptr;
  const Buffer* src = nullptr;
  for (const WirePart& p : m.parts) {
    if (p.kind == WirePart::copy && p.bytes == 0) continue;
    if (copy != nullptr || (src = copy_back_source(p)) == nullptr) return false;
    copy = &p;
  }
  if (copy == nullptr || copy->bytes < 2 * back_piece_bytes_first) return false;
  Device& d = devices_[m.device];
  Running run{.device = d, .device_id = m.device, .value = m.value};
  std::uint64_t at = copy->src_offset;
  for (const std::size_t bytes : back_pieces(copy->bytes)) {
    Copy c;
    try {
      c.dst = staging_->take(bytes);
    } catch (const std::exception& e) {
      fail(std::string("cannot stage a copy to the controller: ") + e.what());
      return true;
    }
    Buffer staging = c.dst;
    c.src = *src;
    c.src_offset = static_cast<std::size_t>(at);
    c.bytes = bytes;
    at += bytes;
    try {
      const Part part{std::move(c)};
      run.local_value = rig::submit(d, std::span<const Part>(&part, 1));
    } catch (const std::exception& e) {
      fail(e.what());  // refused by this machine's rig, or a lost device: as the whole would be
      return true;
    }
    run.back.push_back({run.local_value, std::move(staging), bytes});
  }
  count_submission(m);
  running_ = std::move(run);
  check_running();
  if (running_) watch();
  return true;
}

void AgentWork::send_back_pieces(std::uint64_t reached) {
  Running& run = *running_;
  if (run.back_sent == run.back.size() || reached < run.back[run.back_sent].local_value) return;
  // Every piece ready now in one write, each in DATA frames straight from its staging buffer,
  // which the write holds until it is done.
  Bytes owned;
  rig::detail::PoolVector<Connection::Piece> pieces;
  std::vector<Buffer> sent;
  while (run.back_sent < run.back.size() && reached >= run.back[run.back_sent].local_value) {
    Running::BackPiece& piece = run.back[run.back_sent++];
    add_bulk_frames(
        owned, pieces, Data::type,
        {reinterpret_cast<const std::uint8_t*>(piece.staging.access().data()), piece.bytes});
    sent.push_back(std::move(piece.staging));
  }
  controller_->send_pieces(std::move(owned), pieces,
                           [staging = staging_, sent = std::move(sent)]() mutable {
                             for (Buffer& b : sent) staging->give_back(std::move(b));
                           });
}

void AgentWork::reached(std::uint32_t device, std::uint64_t value) {
  // A timeline only grows, so REACHED of a value says every earlier one of that device is reached
  // too: one held for this turn's write that nothing has followed yet gives way to this one
  // (docs/protocol.md, "Order").
  controller_->send_soon_covering(Reached{device, value},
                                  std::uint64_t{Reached::type} << 32 | device);
}

void AgentWork::count_submission(const Submit& m) {
  WorkCounters::add(&WorkCounters::submissions, 1);
  for (const WirePart& p : m.parts) {
    if (p.kind != WirePart::copy || p.bytes == 0) continue;
    WorkCounters::add(&WorkCounters::copies, 1);
    WorkCounters::add(&WorkCounters::copy_bytes, p.bytes);
  }
}

void AgentWork::watch() {
  // The spins' clock (core/spin.hpp): one reading a turn serves the poll's budget and its yield.
  poll_since_ns_ = rig::detail::steady_ns();
  if (completion_poll_us() > 0) {
    uv_idle_start(&idle_, on_idle);
    return;
  }
  poll_running();
}

void AgentWork::on_idle(uv_idle_t* idle) noexcept {
  auto* self = static_cast<AgentWork*>(idle->data);
  guard([self] { self->poll_running(); }, [self](const std::string& why) { self->fail(why); });
}

void AgentWork::on_async(uv_async_t* async) noexcept {
  auto* self = static_cast<AgentWork*>(async->data);
  guard([self] { self->helper_returned(); }, [self](const std::string& why) { self->fail(why); });
}

void AgentWork::poll_running() {
  // The loop looks at the device's work itself, so that small work is noticed here at once rather
  // than after the device's own thread has published it and given the core back (Driver::progress).
  if (running_ && !shut_) running_->device.core()->driver().progress();
  check_running();
  if (!running_) {
    uv_idle_stop(&idle_);
    return;
  }
  // The thread that publishes the work's end (a device's completion thread or worker) may share
  // this core, as in an agent confined to one CPU: let it run before polling again, once a turn
  // (while the loop's own poll runs, that poll yields, after the turn's answers are written; two
  // yields a turn made that thread's publish wait for two of its slices). With nothing else to
  // run, a yield returns at once; late (a contended core), or while spins are off, the helper
  // sleeps on the work instead.
  const std::int64_t now_ns = rig::detail::steady_ns();
  if (now_ns - poll_since_ns_ < completion_poll_us() * 1000 && rig::detail::spins_allowed(now_ns) &&
      (reactor_.spinning() || rig::detail::yield_for_spin(now_ns))) {
    return;
  }
  // Long work: stop polling and let the helper thread sleep on the timeline and wake the loop. The
  // device's own thread finds the work's end from now on.
  uv_idle_stop(&idle_);
  running_->device.core()->driver().stop_polling();
  wait_off_loop();
}

void AgentWork::wait_off_loop() {
  // For a copy back in pieces, the next piece to send; otherwise the work's end.
  const Running& run = *running_;
  const bool piece = run.back_sent < run.back.size();
  const std::uint64_t value = piece ? run.back[run.back_sent].local_value : run.local_value;
  off_loop(
      [device = run.device, value] {
        try {
          device.wait(value);
        } catch (...) {
          // Lost: the loop sees the loss when it looks.
        }
      },
      [this, piece, device = run.device_id, submitted = run.value] {
        check_running();
        // The same copy still running after a piece (its end may have started the next work): the
        // piece has gone, the next one is waited for.
        if (piece && running_ && !shut_ && running_->device_id == device &&
            running_->value == submitted) {
          wait_off_loop();
        }
      });
}

void AgentWork::check_running() {
  if (!running_ || shut_) return;
  if (auto why = rig::failure(running_->device)) return device_lost(*why);
  // One reading for both: a piece reached between two would end the work without its bytes.
  const std::uint64_t reached = running_->device.reached();
  send_back_pieces(reached);
  if (running_->writes_from_memory == 0 && reached >= running_->local_value) {
    finish_running();
  }
}

void AgentWork::finish_running() {
  Running run = std::move(*running_);
  running_.reset();
  uv_idle_stop(&idle_);
  // Its copies into the controller's memory have gone (send_back_pieces), before this REACHED.
  for (Buffer& b : run.staged) staging_->give_back(std::move(b));
  reached(run.device_id, run.value);
  pump();
}

void AgentWork::tick() {
  if (shut_) return;
  if (idle() && reactor_.now_ms() - last_work_ms_ >= staging_idle_release_ms) {
    staging_->clear();
  }
  for (const auto& [id, d] : devices_) {
    if (auto why = rig::failure(d)) return device_lost(*why);
  }
}

void AgentWork::close(std::function<void()> done) {
  if (shut_) return;
  if (receiving_) {
    return fail(
        "controller: malformed message: CLOSE before the PAYLOAD bytes of the message before it");
  }
  closing_ = std::move(done);
  pump();
}

void AgentWork::release() {
  rails_.shut();
  running_.reset();
  staging_->clear();
  queue_.clear();
  memory_.clear();
  images_.clear();
  for (auto& [id, d] : devices_) {
    if (id != 0 && !rig::failure(d)) rig::close(d);
  }
  devices_.clear();
  opened_.clear();
}

}  // namespace rig::remote
