// The driver of remote hosts and proxies: round trips for memory, programs and devices, and the
// submission path (admit, ready, enqueue) that turns rig's work into one SUBMIT per submission.
#include "remote/controller/proxy.hpp"

#include <set>
#include <string>

#include "core/limits.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "remote/limits.hpp"
#include "remote/wire/codec.hpp"

namespace rig::remote {
namespace {

// A submission the core accepts always fits a SUBMIT, so encoding it never refuses.
static_assert(wire_parts_max >= rig::detail::submission_parts_max);
static_assert(wire_args_max >= rig::detail::run_args_max);

bool is_local_host(const rig::detail::DeviceCore& d) {
  static const rig::detail::DeviceCore* const local = rig::host().core().get();
  return &d == local;
}
bool is_local(const std::shared_ptr<rig::detail::BufferCore>& b) {
  return is_local_host(*b->device());
}

// The device and value of the last work this thread submitted to a remote device. Read and written
// under the submission lock; a plain thread_local as signals.cpp's, so a signal handler's
// submission may use it. A driver at the address of a gone one only makes its first submission
// from this thread go through the loop.
struct LastSubmitted {
  const void* driver = nullptr;
  std::uint64_t value = 0;
};
thread_local LastSubmitted last_submitted;

// A program loaded on an agent's device. The entry names a run gives are kept here, and a run
// carries the name: the agent resolves it, and fails the job if its program has no such entry.
// Owner: its ImageCore. Threads: any (find takes the names' lock). Lifetime: until the last run
// and Image handle are gone; then the agent lets go of the image too.
class ProxyModule final : public rig::detail::Module {
 public:
  ProxyModule(std::weak_ptr<JobLink> link, std::size_t member, std::uint64_t id)
      : link_(std::move(link)), member_(member), id_(id) {}
  ~ProxyModule() override {
    auto link = link_.lock();
    if (!link) return;
    Bytes owned;
    encode(Unload{id_}, owned);
    link->send(member_, std::move(owned), {}, std::nullopt);
  }

  const void* find(const std::string& entry) const override {
    if (entry.size() > name_bytes_max) return nullptr;  // no agent's program has such a name
    std::lock_guard lock(mu_);
    return &*names_.insert(entry).first;
  }
  std::uint64_t id() const noexcept { return id_; }

 private:
  const std::weak_ptr<JobLink> link_;
  const std::size_t member_;
  const std::uint64_t id_;
  mutable std::mutex mu_;
  mutable std::set<std::string> names_;  // a set's nodes never move: find's pointers stay valid
};

}  // namespace

// ---- RemoteDriver

bool RemoteDriver::same_machine(const rig::detail::DeviceCore& other) const {
  const auto* o = dynamic_cast<const RemoteDriver*>(&other.driver());
  return o != nullptr && o->member_ == member_ && !o->link_.owner_before(link_) &&
         !link_.owner_before(o->link_);
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

std::uint64_t RemoteDriver::allocate(std::size_t bytes) {
  auto link = link_.lock();
  if (!link) throw Lost("the job has closed");
  auto reply = link->round_trip(member_, Make{id_, bytes}, Expect::Kind::made);
  const auto& made = std::get<Made>(*reply->answer);
  if (made.memory == 0) throw OutOfMemory(made.why);
  return made.memory;
}

void RemoteDriver::release(std::uint64_t address, std::size_t) noexcept {
  auto link = link_.lock();
  if (!link) return;
  try {
    Bytes owned;
    encode(Free{address}, owned);
    link->send(member_, std::move(owned), {}, std::nullopt);
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
  if (auto link = link_.lock()) link->sending().wait_while_sending(member_, flow_);
  flow_.wait_for_room();
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
    // A round of a rail between two agents, this machine one of them, is in order here too: the
    // agent takes nothing after its RAIL_GO until the sources are read, nor after its RAIL_EXPECT
    // until the round has arrived.
    if (const auto* ordered = dynamic_cast<const OrderedByAgent*>(&dep.device->driver());
        ordered != nullptr && ordered->ordered_by(member_)) {
      continue;
    }
    const rig::detail::SignalsOpen waiting;
    dep.device->timeline().wait(dep.value);
  }
}

namespace {
using Sources = rig::detail::PoolVector<std::shared_ptr<rig::detail::BufferCore>>;
}  // namespace

void RemoteDriver::enqueue(rig::detail::Work work) {
  // Nothing here may call malloc: a signal handler may have made this submission (docs/remote.md,
  // "Signals"). Every container comes from the block pool.
  auto link = link_.lock();
  if (!link) return;  // the device is closed or lost already, and its waiters know
  auto command = Submission::make();
  Expect& e = command->expect;
  e.kind = Expect::Kind::reached;
  e.device_id = id_;
  e.value = work.value;
  const std::uint64_t cost = inflight_cost(work);
  // Latency-bound work may leave from this thread: work that follows nothing still on its way to or
  // in the agent, or whose thread saw all its own earlier work here reached (it waited, as each of
  // several threads that submit and wait does). A thread that keeps work of its own in flight (a
  // pipeline) goes through the loop, which writes what queued at one turn in one write. The order
  // of the device's messages is kept either way: this runs under the submission lock.
  const bool alone =
      flow_.idle() || (last_submitted.driver == this &&
                       reached_.load(std::memory_order_acquire) >= last_submitted.value);
  last_submitted = {this, work.value};
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
    // A rail (Arg::rail, the only object a proxy's run takes): the agent hands its code the
    // address of its rig_rail.
    for (const auto& o : r.objects) {
      WireArg& a = p.args[o.word];
      a.word = 0;
      a.memory = static_cast<const RailObject&>(*o.object).rail_id();
      a.access = WireArg::rail;
    }
  }
  // The core's limits keep every field within the wire's, so this cannot refuse the message.
  // Sized once: the SUBMIT's frame, then a header in `owned` and two pieces for each bulk frame.
  std::size_t frames = 0;
  for (const auto& bytes : sent) frames += (bytes.size() + chunk_bytes - 1) / chunk_bytes;
  Bytes& owned = command->owned;
  owned.reserve(frame_bytes(submit) + frames * frame_header_bytes);
  command->pieces.reserve(1 + 2 * frames);
  encode(submit, owned);
  command->pieces.push_back({nullptr, 0, owned.size()});
  for (const auto& bytes : sent) add_bulk_frames(owned, command->pieces, Payload::type, bytes);
  if (!sources.empty()) {
    command->keep = std::allocate_shared<const Sources>(rig::detail::PoolAllocator<Sources>(),
                                                        std::move(sources));
  }
  e.work = std::move(work);
  command->member = member_;
  flow_.take(cost);
  command->link = std::move(link);
  JobLink& to = *command->link;
  to.submit(std::move(command), alone);
}

void RemoteDriver::reached(const rig::detail::Work& work) noexcept {
  if (work.value > reached_.load(std::memory_order_relaxed)) {
    reached_.store(work.value, std::memory_order_release);
  }
  flow_.give_back(inflight_cost(work));
}

Result<std::unique_ptr<rig::detail::Module>> RemoteDriver::load(const Program& program) {
  auto link = link_.lock();
  if (!link) return Error("the job has closed");
  const auto bytes = program.bytes();
  try {
    auto reply =
        link->round_trip(member_, Load{id_, bytes.size()}, Expect::Kind::loaded,
                         {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()},
                         std::make_shared<const Program>(program));
    const auto& loaded = std::get<Loaded>(*reply->answer);
    if (loaded.image == 0) return Error(loaded.why);
    return std::unique_ptr<rig::detail::Module>(
        std::make_unique<ProxyModule>(link_, member_, loaded.image));
  } catch (const Lost& e) {
    return Error(e.what());
  }
}

// ---- RemoteProxies

std::shared_ptr<rig::detail::DeviceCore> RemoteProxies::make(std::size_t member, std::uint32_t id,
                                                             rig::detail::DeviceInfo info) {
  auto core = std::make_shared<rig::detail::DeviceCore>(std::move(info));
  core->attach(std::make_unique<RemoteDriver>(link_, member, id));
  return core;
}

void RemoteProxies::add(const std::shared_ptr<rig::detail::DeviceCore>& device) {
  rig::detail::Registry::get().add(device);
}

void RemoteProxies::add_reach(rig::detail::DeviceCore& from, std::uint32_t to) {
  static_cast<RemoteDriver&>(from.driver()).add_reach(to);
}

void RemoteProxies::reached(rig::detail::DeviceCore& device, std::uint64_t value,
                            const rig::detail::Work& work) noexcept {
  device.timeline().publish(value);
  static_cast<RemoteDriver&>(device.driver()).reached(work);
}

}  // namespace rig::remote
