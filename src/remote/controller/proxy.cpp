// The driver of remote hosts and proxies: round trips for memory, programs and devices, and the
// submission path (admit, ready, enqueue) that turns rig's work into one SUBMIT per submission.
#include "remote/controller/proxy.hpp"

#include <new>
#include <set>

#include "core/limits.hpp"
#include "core/signals.hpp"
#include "remote/controller/controller.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {
namespace {

// A submission the core accepts always fits a SUBMIT, so encoding it never refuses.
static_assert(wire_parts_max >= rig::detail::submission_parts_max);
static_assert(wire_args_max >= rig::detail::run_args_max);

// A device holds at most this much work that its agent has not reported reached; a submit beyond
// it waits. Bounds the memory a fast controller can pile up at a slow agent.
constexpr std::uint64_t inflight_bytes_max = 64ull * 1024 * 1024;
// What a part costs in that count besides the bytes it copies: its share of the message.
constexpr std::uint64_t part_overhead_bytes = 128;

bool is_local_host(const rig::detail::DeviceCore& d) {
  static const rig::detail::DeviceCore* const local = rig::host().core().get();
  return &d == local;
}
bool is_local(const std::shared_ptr<rig::detail::BufferCore>& b) {
  return is_local_host(*b->device());
}

std::uint64_t work_bytes(const rig::detail::Work& work) {
  std::uint64_t bytes = part_overhead_bytes;
  for (const auto& part : work.parts) {
    bytes += part_overhead_bytes;
    if (const auto* c = std::get_if<rig::detail::CopyWork>(&part)) bytes += c->bytes;
  }
  return bytes;
}

// Posts `fn` to the job's loop side if the job still runs there; else runs `gone` on the loop.
template <typename F, typename G>
void post_to_job(const std::shared_ptr<JobState>& job, F fn, G gone) {
  Runtime::get().post([job, fn = std::move(fn), gone = std::move(gone)]() mutable {
    if (job->core != nullptr) {
      fn(*job->core);
    } else {
      gone();
    }
  });
}

// A program loaded on an agent's device. The entry names a run gives are kept here, and a run
// carries the name: the agent resolves it, and fails the job if its program has no such entry.
// Owner: its ImageCore. Threads: any (find takes the names' lock). Lifetime: until the last run
// and Image handle are gone; then the agent lets go of the image too.
class ProxyModule final : public rig::detail::Module {
 public:
  ProxyModule(std::weak_ptr<JobState> job, std::size_t member, std::uint64_t id)
      : job_(std::move(job)), member_(member), id_(id) {}
  ~ProxyModule() override {
    auto job = job_.lock();
    if (!job) return;
    Bytes owned;
    encode(Unload{id_}, owned);
    post_to_job(
        job,
        [member = member_, owned = std::move(owned)](ControllerJob& c) mutable {
          c.send(member, std::move(owned), {}, std::nullopt);
        },
        [] {});
  }

  const void* find(const std::string& entry) const override {
    if (entry.size() > name_bytes_max) return nullptr;  // no agent's program has such a name
    std::lock_guard lock(mu_);
    return &*names_.insert(entry).first;
  }
  std::uint64_t id() const noexcept { return id_; }

 private:
  const std::weak_ptr<JobState> job_;
  const std::size_t member_;
  const std::uint64_t id_;
  mutable std::mutex mu_;
  mutable std::set<std::string> names_;  // a set's nodes never move: find's pointers stay valid
};

}  // namespace

std::shared_ptr<Reply> round_trip(const std::shared_ptr<JobState>& job, std::size_t member,
                                  const Message& message, Expect::Kind kind,
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
  post_to_job(
      job,
      [member, owned = std::move(owned), pieces = std::move(pieces), e = std::move(e),
       keep = std::move(keep)](ControllerJob& c) mutable {
        c.send(member, std::move(owned), std::move(pieces), std::move(e), std::move(keep));
      },
      [job, reply] {
        const auto cause = job->outcome->cause();
        reply->failed = cause ? *cause : "the job has closed";
        reply->done.set();
      });
  {
    // A wait for the agent, which may first finish earlier work: signal handlers may run in it.
    const rig::detail::SignalsOpen waiting;
    while (!reply->done.wait_for_ms(1000)) {
    }
  }
  if (!reply->answer) throw Lost(reply->failed);
  return reply;
}

// ---- RemoteDriver

std::shared_ptr<JobState> RemoteDriver::live_job() const {
  return job_.lock();
}

bool RemoteDriver::same_machine(const rig::detail::DeviceCore& other) const {
  const auto* o = dynamic_cast<const RemoteDriver*>(&other.driver());
  return o != nullptr && o->member_ == member_ && !o->job_.owner_before(job_) &&
         !job_.owner_before(o->job_);
}

void RemoteDriver::add_reach(std::uint32_t id) {
  std::lock_guard lock(reach_mu_);
  for (std::uint32_t r : reach_) {
    if (r == id) return;
  }
  reach_.push_back(id);
}

bool RemoteDriver::reaches(const rig::detail::DeviceCore& other) const {
  // This process's memory travels in the messages themselves.
  if (is_local_host(other)) return true;
  if (!same_machine(other)) return false;
  const std::uint32_t id = static_cast<const RemoteDriver&>(other.driver()).id_;
  std::lock_guard lock(reach_mu_);
  for (std::uint32_t r : reach_) {
    if (r == id) return true;
  }
  return false;
}

void RemoteDriver::reached(std::uint64_t inflight_bytes) noexcept {
  inflight_bytes_.fetch_sub(inflight_bytes, std::memory_order_acq_rel);
  progress_.fetch_add(1, std::memory_order_release);
  progress_.notify_all();
}

void RemoteDriver::stop() noexcept {
  stopped_.store(true, std::memory_order_release);
  progress_.fetch_add(1, std::memory_order_release);
  progress_.notify_all();
}

std::uint64_t RemoteDriver::allocate(std::size_t bytes) {
  auto job = live_job();
  if (!job) throw Lost("the job has closed");
  auto reply = round_trip(job, member_, Make{id_, bytes}, Expect::Kind::made);
  const auto& made = std::get<Made>(*reply->answer);
  if (made.memory == 0) throw OutOfMemory(made.why);
  return made.memory;
}

void RemoteDriver::release(std::uint64_t address, std::size_t) noexcept {
  auto job = live_job();
  if (!job) return;
  try {
    Bytes owned;
    encode(Free{address}, owned);
    post_to_job(
        job,
        [member = member_, owned = std::move(owned)](ControllerJob& c) mutable {
          c.send(member, std::move(owned), {}, std::nullopt);
        },
        [] {});
  } catch (...) {
    // Out of memory for the message: the agent frees the buffer with the rest at the job's end.
  }
}

void RemoteDriver::admit(const rig::detail::Work& work) {
  for (const auto& part : work.parts) {
    const auto* c = std::get_if<rig::detail::CopyWork>(&part);
    if (c != nullptr && is_local(c->dst) && is_local(c->src)) {
      throw std::invalid_argument(
          "rig: a copy between two buffers of this process's memory runs on this process's host, "
          "not on a device of another machine");
    }
  }
  // Flow control: wait while the connection sends an earlier message that the kernel could not
  // take at once, and while the device has more than its share of work not yet reached.
  wait_while_sending();
  for (;;) {
    const std::uint32_t seen = progress_.load(std::memory_order_acquire);
    if (inflight_bytes_.load(std::memory_order_acquire) <= inflight_bytes_max) return;
    if (stopped_.load(std::memory_order_acquire)) return;  // the next check raises Lost
    const rig::detail::SignalsOpen waiting;
    progress_.wait(seen, std::memory_order_acquire);
  }
}

void RemoteDriver::wait_while_sending() {
  auto job = live_job();
  if (!job || job->sending_count <= member_) return;
  for (;;) {
    const std::uint32_t seen = job->send_progress.load(std::memory_order_acquire);
    if (!job->sending[member_].load(std::memory_order_acquire)) return;
    if (stopped_.load(std::memory_order_acquire)) return;
    const rig::detail::SignalsOpen waiting;
    job->send_progress.wait(seen, std::memory_order_acquire);
  }
}

void RemoteDriver::ready(const rig::detail::Work& work) {
  // The bytes a copy from this process's memory sends must be in place before they are read for
  // the message, whichever device wrote them last, this one included (its copies into this
  // process's memory land only when their DATA arrives). The core leaves work on this device out
  // of work.deps, so the last write of each such source is looked up here, under the submission
  // lock that guards it.
  for (const auto& part : work.parts) {
    const auto* c = std::get_if<rig::detail::CopyWork>(&part);
    if (c == nullptr || !is_local(c->src) || !c->src->uses.last_write) continue;
    const rig::detail::Dep& w = *c->src->uses.last_write;
    if (w.device->timeline().reached() >= w.value) continue;
    const rig::detail::SignalsOpen waiting;
    w.device->timeline().wait(w.value);
  }
  // Otherwise work on this machine follows all work sent to it before, so only other devices'
  // work is waited for: work that uses this process's memory that the submission copies into.
  for (const rig::detail::Dep& dep : work.deps) {
    if (same_machine(*dep.device)) continue;
    const rig::detail::SignalsOpen waiting;
    dep.device->timeline().wait(dep.value);
  }
}

namespace {

using Sources = rig::detail::PoolVector<std::shared_ptr<rig::detail::BufferCore>>;

// One submission on its way to the loop: everything enqueue built, in a block of the block pool,
// posted without a std::function (whose captures would come from malloc). Owner: enqueue until it
// posts, then the loop, which runs it once and frees it. Threads: built on the submitter's thread
// (maybe in a signal handler), run and destroyed on the loop thread.
struct SubmitCommand final : Command {
  std::shared_ptr<JobState> job;
  std::size_t member = 0;
  Bytes owned;
  rig::detail::PoolVector<Connection::Piece> pieces;
  Expect expect;
  std::shared_ptr<const Sources> sources;  // the copies' source buffers, until written

  // Frees a command (run, or never posted).
  struct Free {
    void operator()(SubmitCommand* c) const noexcept {
      c->~SubmitCommand();
      rig::detail::pool_release(c, sizeof(SubmitCommand));
    }
  };
  using Owned = std::unique_ptr<SubmitCommand, Free>;
  static Owned make() {
    return Owned(new (rig::detail::pool_allocate(sizeof(SubmitCommand))) SubmitCommand());
  }

  void run(Reactor&) noexcept override {
    const Owned self(this);
    if (job->core != nullptr) {
      job->core->send(member, std::move(owned), std::move(pieces), std::move(expect),
                      std::move(sources));
    }
  }
};

}  // namespace

void RemoteDriver::enqueue(rig::detail::Work work) {
  // Nothing here may call malloc: a signal handler may have made this submission (docs/remote.md,
  // "Signals"). Every container comes from the block pool.
  auto job = live_job();
  if (!job) return;  // the device is closed or lost already, and its waiters know
  auto command = SubmitCommand::make();
  Expect& e = command->expect;
  e.kind = Expect::Kind::reached;
  e.device_id = id_;
  e.value = work.value;
  e.inflight_bytes = work_bytes(work);
  Submit submit{id_, work.value, {}};
  rig::detail::PoolVector<std::span<const std::uint8_t>> sent;
  Sources sources;
  submit.parts.reserve(work.parts.size());
  for (const auto& part : work.parts) {
    WirePart& p = submit.parts.emplace_back();
    if (const auto* c = std::get_if<rig::detail::CopyWork>(&part)) {
      p.kind = WirePart::copy;
      const bool from_here = is_local(c->src);
      const bool to_here = is_local(c->dst);
      p.dst = to_here ? 0 : c->dst->address();
      p.dst_offset = c->dst_offset;
      p.src = from_here ? 0 : c->src->address();
      p.src_offset = c->src_offset;
      p.bytes = c->bytes;
      if (from_here && c->bytes > 0) {
        sent.emplace_back(reinterpret_cast<const std::uint8_t*>(c->src->data() + c->src_offset),
                          c->bytes);
        sources.push_back(c->src);
      }
      if (to_here && c->bytes > 0) e.copies.push_back({c->dst->data() + c->dst_offset, c->bytes});
      continue;
    }
    const auto& r = std::get<rig::detail::RunWork>(part);
    p.kind = WirePart::run;
    p.image = static_cast<const ProxyModule&>(*r.image->module).id();
    const auto& entry = *static_cast<const std::string*>(r.entry);
    p.entry.assign(entry.data(), entry.size());
    for (int i = 0; i < 3; ++i) {
      p.shape[i] = r.shape.grid[i];
      p.shape[3 + i] = r.shape.block[i];
    }
    p.args.resize(r.words.size());
    for (std::size_t i = 0; i < r.words.size(); ++i) p.args[i].word = r.words[i];
    for (std::size_t j = 0; j < r.buffer_args.size(); ++j) {
      WireArg& a = p.args[r.buffer_args[j].word];
      a.word = 0;
      a.memory = r.buffers[j]->address();
      a.offset = r.buffer_args[j].offset;
      a.access = static_cast<std::uint8_t>(r.buffer_args[j].access);
    }
  }
  // The core's limits keep every field within the wire's, so this cannot refuse the message.
  Bytes& owned = command->owned;
  encode(submit, owned);
  command->pieces.push_back({nullptr, 0, owned.size()});
  for (const auto& bytes : sent) add_bulk_frames(owned, command->pieces, Payload::type, bytes);
  if (!sources.empty()) {
    command->sources = std::allocate_shared<const Sources>(rig::detail::PoolAllocator<Sources>(),
                                                           std::move(sources));
  }
  e.work = std::move(work);
  command->job = std::move(job);
  command->member = member_;
  inflight_bytes_.fetch_add(e.inflight_bytes, std::memory_order_acq_rel);
  Runtime::get().reactor().post(command.release());
}

Result<std::unique_ptr<rig::detail::Module>> RemoteDriver::load(const Program& program) {
  auto job = live_job();
  if (!job) return Error("the job has closed");
  const auto bytes = program.bytes();
  try {
    auto reply = round_trip(job, member_, Load{id_, bytes.size()}, Expect::Kind::loaded,
                            {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()},
                            std::make_shared<const Program>(program));
    const auto& loaded = std::get<Loaded>(*reply->answer);
    if (loaded.image == 0) return Error(loaded.why);
    return std::unique_ptr<rig::detail::Module>(
        std::make_unique<ProxyModule>(job_, member_, loaded.image));
  } catch (const Lost& e) {
    return Error(e.what());
  }
}

}  // namespace rig::remote
