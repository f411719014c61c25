// The public handles' accessors and the calls that act on one device or buffer.
#include <bit>
#include <cstring>
#include <stdexcept>

#include "core/device.hpp"
#include "core/registry.hpp"
#include "core/signals.hpp"
#include "rig/rig.hpp"

namespace rig {
namespace {

const detail::DeviceCore& core_of(const Device& d) {
  if (!d) throw std::invalid_argument("rig: use of an empty Device handle");
  return *d.core();
}

detail::BufferCore& core_of(const Buffer& b) {
  if (!b) throw std::invalid_argument("rig: use of an empty Buffer handle");
  return *b.core();
}

}  // namespace

std::string_view kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::cpu:
      return "CPU";
    case Kind::sim:
      return "SIM";
    case Kind::cuda:
      return "CUDA";
  }
  return "?";
}

std::optional<Kind> kind_from_name(std::string_view name) noexcept {
  for (Kind k : {Kind::cpu, Kind::sim, Kind::cuda}) {
    if (kind_name(k) == name) return k;
  }
  return std::nullopt;
}

Kind Device::kind() const {
  return core_of(*this).info().kind;
}
const std::string& Device::name() const {
  return core_of(*this).info().name;
}
const std::string& Device::arch() const {
  return core_of(*this).info().arch;
}
std::uint64_t Device::budget() const {
  return core_of(*this).info().budget_bytes;
}

std::uint64_t Device::reached() const {
  const auto& c = core_of(*this);
  c.timeline().check();
  return c.timeline().reached();
}

void Device::wait(std::uint64_t value) const {
  const auto& c = core_of(*this);
  if (value > c.submitted()) {
    throw std::invalid_argument("rig: wait on " + c.info().name + " for value " +
                                std::to_string(value) + ", beyond the last submitted (" +
                                std::to_string(c.submitted()) + ")");
  }
  c.timeline().wait(value);
}

bool reaches(const Device& a, const Device& b) {
  const auto& ca = core_of(a);
  const auto& cb = core_of(b);
  return &ca == &cb || ca.driver().reaches(cb);
}

void close(const Device& d) {
  core_of(d);
  if (d.kind() == Kind::cpu && d == host()) {
    throw std::invalid_argument("rig: the host device cannot be closed");
  }
  d.core()->close();
}

void fail(std::string why) {
  detail::Registry::get().fail(why);
}

std::optional<std::string> failure(const Device& d) {
  const auto& t = core_of(d).timeline();
  if (!t.lost()) return std::nullopt;
  return t.why();
}

std::optional<std::string> process_failure() {
  return detail::Registry::get().failure();
}

Buffer Buffer::make(const Device& d, std::size_t bytes) {
  const detail::SignalsBlocked blocked;
  core_of(d).check_usable();
  return Buffer(std::make_shared<detail::BufferCore>(d.core(), bytes));
}

Buffer Buffer::borrow(void* data, std::size_t bytes) {
  if (data == nullptr && bytes != 0) {
    throw std::invalid_argument("rig: Buffer::borrow of " + std::to_string(bytes) +
                                " bytes at a null pointer");
  }
  const Device h = host();
  h.core()->check_usable();
  return Buffer(
      std::make_shared<detail::BufferCore>(h.core(), static_cast<std::byte*>(data), bytes));
}

const Device& Buffer::device() const {
  return core_of(*this).handle();
}

std::size_t Buffer::size() const {
  return core_of(*this).size();
}

std::span<std::byte> Buffer::access() const {
  const detail::SignalsBlocked blocked;
  auto& b = core_of(*this);
  const auto& dev = b.device();
  // Only this process's host memory is addressable here; a remote host's is not.
  if (dev->info().kind != Kind::cpu || dev != host().core()) {
    throw std::invalid_argument("rig: Buffer::access on a buffer of " + dev->info().name +
                                ": only host buffers can be accessed directly; copy it to one");
  }
  b.check_usable();
  std::vector<detail::Dep> pending;
  {
    const detail::SubmissionLock lock;
    if (b.uses.last_write) pending.push_back(*b.uses.last_write);
    pending.insert(pending.end(), b.uses.reads.begin(), b.uses.reads.end());
  }
  {
    const detail::SignalsOpen waiting;
    for (const auto& dep : pending) dep.device->timeline().wait(dep.value);
  }
  return {b.data(), b.size()};
}

const Device& Image::device() const {
  if (!core_) throw std::invalid_argument("rig: use of an empty Image handle");
  return core_->device;
}

Arg Arg::f32(float f) {
  return Arg{std::uint64_t{std::bit_cast<std::uint32_t>(f)}};
}

}  // namespace rig
