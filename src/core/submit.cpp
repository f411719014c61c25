// Submissions: validation, ordering by memory, and the hand-off to the device's driver.
#include <algorithm>
#include <stdexcept>

#include "core/device.hpp"
#include "core/limits.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "rig/rig.hpp"

namespace rig {
namespace {

using detail::BufferCore;
using detail::Dep;
using detail::DeviceCore;

[[noreturn]] void misuse(const std::string& what) {
  throw std::invalid_argument("rig: " + what);
}

std::string range_text(std::size_t offset, std::size_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
         std::to_string(bytes) + ")";
}

// One buffer a submission touches, and how.
struct Use {
  std::shared_ptr<BufferCore> buffer;
  bool writes;
};

// What a buffer is to its part: a copy's "destination" or "source", or a run's argument N. Its
// text is built only for an error: a valid submission allocates nothing outside the block pool
// (core/pool.hpp).
struct Role {
  static constexpr std::size_t copy_side = static_cast<std::size_t>(-1);
  const char* side;  // for a copy
  std::size_t argument = copy_side;
  std::string text() const {
    return argument == copy_side ? side : "argument " + std::to_string(argument);
  }
};

BufferCore& usable_buffer(const Buffer& b, const Role& role, std::size_t part) {
  if (!b) misuse("part " + std::to_string(part) + ": the " + role.text() + " buffer is empty");
  b.core()->check_usable();
  return *b.core();
}

void check_range(const BufferCore& b, std::size_t offset, std::size_t bytes, const Role& role,
                 std::size_t part) {
  if (offset > b.size() || bytes > b.size() - offset) {
    misuse("part " + std::to_string(part) + ": " + role.text() + " range " +
           range_text(offset, bytes) + " is outside its buffer of " + std::to_string(b.size()) +
           " bytes on " + b.handle().name());
  }
}

void check_reach(const DeviceCore& d, const BufferCore& b, const Role& role, std::size_t part) {
  const DeviceCore& owner = *b.device();
  if (&owner != &d && !d.driver().reaches(owner)) {
    misuse("part " + std::to_string(part) + ": " + d.info().name + " does not reach the " +
           role.text() + " buffer on " + owner.info().name);
  }
  owner.check_usable();
}

constexpr Role destination{"destination"};
constexpr Role source{"source"};

detail::CopyWork validate_copy(const DeviceCore& d, const Copy& c, std::size_t part,
                               detail::PoolVector<Use>& uses) {
  BufferCore& dst = usable_buffer(c.dst, destination, part);
  BufferCore& src = usable_buffer(c.src, source, part);
  check_range(dst, c.dst_offset, c.bytes, destination, part);
  check_range(src, c.src_offset, c.bytes, source, part);
  check_reach(d, dst, destination, part);
  check_reach(d, src, source, part);
  uses.push_back({c.src.core(), false});
  uses.push_back({c.dst.core(), true});
  return {c.dst.core(), c.dst_offset, c.src.core(), c.src_offset, c.bytes};
}

detail::RunWork validate_run(DeviceCore& d, const Run& r, std::size_t part,
                             detail::PoolVector<Use>& uses) {
  const auto where = [part] { return "part " + std::to_string(part) + ": "; };
  if (!r.image) misuse(where() + "the run's image is empty");
  if (r.image.core()->device.core().get() != &d) {
    misuse(where() + "the image was loaded on " + r.image.device().name() + ", not on " +
           d.info().name);
  }
  const void* entry = r.image.core()->module->find(r.entry);
  if (entry == nullptr) misuse(where() + "the program has no entry point '" + r.entry + "'");
  for (int i = 0; i < 3; ++i) {
    if (r.shape.grid[i] == 0 || r.shape.block[i] == 0) {
      misuse(where() + "the launch shape of '" + r.entry + "' has a zero dimension");
    }
  }
  if (r.args.size() > detail::run_args_max) {
    misuse(where() + std::to_string(r.args.size()) + " arguments, more than the " +
           std::to_string(detail::run_args_max) + " a run takes");
  }
  detail::RunWork w{r.image.core(), entry, r.shape, {}, {}, {}, {}};
  w.words.reserve(r.args.size());
  for (std::size_t i = 0; i < r.args.size(); ++i) {
    if (const auto* word = std::get_if<std::uint64_t>(&r.args[i].value)) {
      w.words.push_back(*word);
      continue;
    }
    if (const auto* object = std::get_if<Arg::Object>(&r.args[i].value)) {
      if (!object->object)
        misuse(where() + "argument " + std::to_string(i) + " is an empty object");
      object->object->check_run_on(d);
      w.objects.push_back({static_cast<std::uint32_t>(w.words.size()), object->object});
      w.words.push_back(0);
      continue;
    }
    const auto& mem = std::get<Arg::Mem>(r.args[i].value);
    const Role role{nullptr, i};
    BufferCore& b = usable_buffer(mem.buffer, role, part);
    if (mem.offset > b.size()) {
      misuse(where() + role.text() + ": offset " + std::to_string(mem.offset) +
             " is past the end of its buffer of " + std::to_string(b.size()) + " bytes");
    }
    check_reach(d, b, role, part);
    w.buffer_args.push_back({static_cast<std::uint32_t>(w.words.size()), mem.access, mem.offset});
    w.words.push_back(b.address() + mem.offset);
    w.buffers.push_back(mem.buffer.core());
    if (mem.access != Access::write) uses.push_back({mem.buffer.core(), false});
    if (mem.access != Access::read) uses.push_back({mem.buffer.core(), true});
  }
  return w;
}

// Adds `dep` to `deps` unless it is on `self` (in order already) or already covered.
void add_dep(detail::PoolVector<Dep>& deps, const DeviceCore& self, const Dep& dep) {
  if (dep.device.get() == &self) return;
  if (dep.device->timeline().reached() >= dep.value) return;
  for (Dep& d : deps) {
    if (d.device == dep.device) {
      d.value = std::max(d.value, dep.value);
      return;
    }
  }
  deps.push_back(dep);
}

void set_read(detail::PoolVector<Dep>& reads, const Dep& dep) {
  for (Dep& r : reads) {
    if (r.device == dep.device) {
      r.value = std::max(r.value, dep.value);
      return;
    }
  }
  reads.push_back(dep);
}

}  // namespace

std::uint64_t submit(const Device& d, std::span<const Part> parts) {
  const detail::SignalsBlocked blocked;
  if (!d) misuse("submit to an empty Device handle");
  DeviceCore& dev = *d.core();
  dev.check_usable();
  if (parts.size() > detail::submission_parts_max) {
    misuse("a submission of " + std::to_string(parts.size()) + " parts, more than " +
           std::to_string(detail::submission_parts_max));
  }

  detail::Work work;
  detail::PoolVector<Use> uses;
  work.parts.reserve(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (const auto* c = std::get_if<Copy>(&parts[i])) {
      work.parts.emplace_back(validate_copy(dev, *c, i, uses));
    } else {
      work.parts.emplace_back(validate_run(dev, std::get<Run>(parts[i]), i, uses));
    }
  }

  dev.driver().admit(work);

  detail::SubmissionLock lock;
  // Checked again under the lock: a loss or close since the first check must not let work in.
  dev.check_usable();
  for (const Use& u : uses) {
    auto& rec = u.buffer->uses;
    if (rec.last_write) add_dep(work.deps, dev, *rec.last_write);
    if (u.writes) {
      for (const Dep& r : rec.reads) add_dep(work.deps, dev, r);
    }
  }
  dev.driver().ready(work);
  work.value = dev.next_value();
  const Dep self{d.core(), work.value};
  for (const Use& u : uses) {
    auto& rec = u.buffer->uses;
    if (u.writes) {
      rec.last_write = self;
      rec.reads.clear();
    } else {
      set_read(rec.reads, self);
    }
  }
  const std::uint64_t value = work.value;
  dev.driver().enqueue(std::move(work));
  return value;
}

Fence copy(const Buffer& dst, std::size_t dst_offset, const Buffer& src, std::size_t src_offset,
           std::size_t bytes) {
  const detail::SignalsBlocked blocked;
  if (!dst || !src) misuse("copy with an empty Buffer handle");
  const Device& to = dst.device();
  const Device& from = src.device();
  Device on;
  if (reaches(to, from)) {
    on = to;
  } else if (reaches(from, to)) {
    on = from;
  }
  if (bytes == 0) {
    // Nothing to move: done at once, even between devices that cannot reach each other, but
    // bounds and usability are still the caller's promise.
    check_range(usable_buffer(dst, destination, 0), dst_offset, 0, destination, 0);
    check_range(usable_buffer(src, source, 0), src_offset, 0, source, 0);
    if (!on) on = to;
    return Fence{on, on.reached()};
  }
  if (!on) {
    misuse("copy from " + from.name() + " to " + to.name() +
           ": neither device reaches the other; copy through a buffer both reach");
  }
  const Part part = Copy{dst, dst_offset, src, src_offset, bytes};
  return Fence{on, submit(on, part)};
}

}  // namespace rig
