// Issuing work to a CUDA stream: copies (direct, peer, and staged through pinned memory for
// pageable process memory), kernel launches, and the event that ends each work.
#include <algorithm>
#include <cstring>

#include "backends/cuda/engine.hpp"
#include "backends/host/host.hpp"

namespace rig::backends::cuda {
namespace {

using detail::BufferCore;

[[noreturn]] void fail(const Outcome& o) {
  throw DeviceError{o.why};
}

void checked(const Outcome& o) {
  if (!o) fail(o);
}

bool on_host(const BufferCore& b) {
  return is_local_host(*b.device());
}

// Whether process memory [p, p+bytes) is pinned: a host buffer rig allocated pinned, or memory
// the application registered or allocated through the driver itself (the driver knows its range).
bool pinned(const Engine& e, const BufferCore& b, std::size_t offset, std::size_t bytes) {
  if (is_pinned_host_buffer(b)) return true;
  const auto p = reinterpret_cast<CUdeviceptr>(b.data() + offset);
  unsigned int type = 0;
  CUdeviceptr start = 0;
  std::size_t size = 0;
  const Api& api = e.api;
  if (api.cuPointerGetAttribute.fn(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
      type != CU_MEMORYTYPE_HOST ||
      api.cuPointerGetAttribute.fn(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) !=
          CUDA_SUCCESS ||
      api.cuPointerGetAttribute.fn(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS) {
    return false;
  }
  return start <= p && bytes <= size - (p - start);
}

// How a copy part runs on this device.
enum class Path { device, to_device, to_host, staged_to_device, staged_to_host, host_to_host };

Path path_of(const Engine& e, const detail::CopyWork& c) {
  const bool src_host = on_host(*c.src);
  const bool dst_host = on_host(*c.dst);
  if (src_host && dst_host) return Path::host_to_host;
  if (src_host) {
    return pinned(e, *c.src, c.src_offset, c.bytes) ? Path::to_device : Path::staged_to_device;
  }
  if (dst_host) {
    return pinned(e, *c.dst, c.dst_offset, c.bytes) ? Path::to_host : Path::staged_to_host;
  }
  return Path::device;
}

void ensure_staging(Engine& e) {
  if (!e.staging.slots.empty()) return;
  e.staging.slots.resize(staging_slots);
  for (Staging::Slot& s : e.staging.slots) {
    void* p = nullptr;
    checked(check(e.api, e.gpu.name, e.api.cuMemHostAlloc, &p, staging_chunk_bytes, 0u));
    s.memory = static_cast<std::byte*>(p);
    checked(check(e.api, e.gpu.name, e.api.cuEventCreate, &s.done, event_flags));
  }
}

// The slot's last DMA is done: it may be filled or read by the host.
Staging::Slot& free_slot(Engine& e, std::size_t chunk) {
  Staging::Slot& s = e.staging.slots[chunk % e.staging.slots.size()];
  if (s.used) checked(wait_event(e, s.done));
  return s;
}

void record_slot(Engine& e, Staging::Slot& s) {
  checked(check(e.api, e.gpu.name, e.api.cuEventRecord, s.done, e.stream));
  s.used = true;
}

// Pageable to device: the host fills a slot while the DMA engine empties the one before.
void staged_to_device(Engine& e, CUdeviceptr dst, const std::byte* src, std::size_t bytes) {
  ensure_staging(e);
  for (std::size_t off = 0, k = 0; off < bytes; off += staging_chunk_bytes, ++k) {
    const std::size_t n = std::min(staging_chunk_bytes, bytes - off);
    Staging::Slot& s = free_slot(e, k);
    std::memcpy(s.memory, src + off, n);
    checked(check(e.api, e.gpu.name, e.api.cuMemcpyHtoDAsync, dst + off, s.memory, n, e.stream));
    record_slot(e, s);
  }
}

// Device to pageable: every slot is filled by DMA ahead; the host empties each in turn and hands
// it back for the chunk one round later.
void staged_to_host(Engine& e, std::byte* dst, CUdeviceptr src, std::size_t bytes) {
  ensure_staging(e);
  const std::size_t chunks = (bytes + staging_chunk_bytes - 1) / staging_chunk_bytes;
  const std::size_t ahead = e.staging.slots.size();
  auto fill = [&](std::size_t k) {
    const std::size_t off = k * staging_chunk_bytes;
    const std::size_t n = std::min(staging_chunk_bytes, bytes - off);
    Staging::Slot& s = free_slot(e, k);
    checked(check(e.api, e.gpu.name, e.api.cuMemcpyDtoHAsync, s.memory, src + off, n, e.stream));
    record_slot(e, s);
  };
  for (std::size_t k = 0; k < std::min(chunks, ahead); ++k) fill(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t off = k * staging_chunk_bytes;
    const std::size_t n = std::min(staging_chunk_bytes, bytes - off);
    Staging::Slot& s = free_slot(e, k);
    std::memcpy(dst + off, s.memory, n);
    if (k + ahead < chunks) fill(k + ahead);
  }
}

// Host memory the stream may still be using (pinned buffers under DMA) is touched by the host only
// once the stream has drained.
void drain(Engine& e) {
  CUevent ev = nullptr;
  {
    std::lock_guard lock(e.mu);
    checked(e.take_event_locked(&ev));
  }
  Outcome o = check(e.api, e.gpu.name, e.api.cuEventRecord, ev, e.stream);
  if (o) o = wait_event(e, ev);
  std::lock_guard lock(e.mu);
  e.spare_events.push_back(ev);
  checked(o);
}

const Gpu& gpu_of(const Engine& e, const BufferCore& b) {
  const Engine* other = engine_of(*b.device());
  return other != nullptr ? other->gpu : e.gpu;
}

void issue_copy(Engine& e, const detail::CopyWork& c) {
  if (c.bytes == 0) return;
  const Api& api = e.api;
  const std::string& name = e.gpu.name;
  switch (path_of(e, c)) {
    case Path::device: {
      const CUdeviceptr dst = c.dst->address() + c.dst_offset;
      const CUdeviceptr src = c.src->address() + c.src_offset;
      const Gpu& dg = gpu_of(e, *c.dst);
      const Gpu& sg = gpu_of(e, *c.src);
      if (&dg == &sg) {
        checked(check(api, name, api.cuMemcpyDtoDAsync, dst, src, c.bytes, e.stream));
      } else {
        checked(check(api, name, api.cuMemcpyPeerAsync, dst, dg.context, src, sg.context, c.bytes,
                      e.stream));
      }
      return;
    }
    case Path::to_device:
      checked(check(api, name, api.cuMemcpyHtoDAsync, c.dst->address() + c.dst_offset,
                    static_cast<const void*>(c.src->data() + c.src_offset), c.bytes, e.stream));
      return;
    case Path::to_host:
      checked(check(api, name, api.cuMemcpyDtoHAsync,
                    static_cast<void*>(c.dst->data() + c.dst_offset),
                    c.src->address() + c.src_offset, c.bytes, e.stream));
      return;
    case Path::staged_to_device:
      staged_to_device(e, c.dst->address() + c.dst_offset, c.src->data() + c.src_offset, c.bytes);
      return;
    case Path::staged_to_host:
      staged_to_host(e, c.dst->data() + c.dst_offset, c.src->address() + c.src_offset, c.bytes);
      return;
    case Path::host_to_host:
      drain(e);
      // memmove: a copy within one buffer may overlap.
      std::memmove(c.dst->data() + c.dst_offset, c.src->data() + c.src_offset, c.bytes);
      return;
  }
}

void issue_run(Engine& e, const detail::RunWork& r) {
  // Each kernel parameter is read from its own 64-bit word; a parameter narrower than 8 bytes (a
  // float, an int) takes the word's low bytes, which is where Arg::f32 and small words put it.
  std::vector<void*> params(r.words.size());
  for (std::size_t i = 0; i < r.words.size(); ++i) {
    params[i] = const_cast<std::uint64_t*>(&r.words[i]);
  }
  auto fn = reinterpret_cast<CUfunction>(const_cast<void*>(r.entry));
  checked(check(e.api, e.gpu.name, e.api.cuLaunchKernel, fn, r.shape.grid[0], r.shape.grid[1],
                r.shape.grid[2], r.shape.block[0], r.shape.block[1], r.shape.block[2], 0u, e.stream,
                params.empty() ? nullptr : params.data(), nullptr));
}

}  // namespace

bool direct_only(const Engine& e, const detail::Work& work) {
  for (const detail::WorkPart& part : work.parts) {
    const auto* c = std::get_if<detail::CopyWork>(&part);
    if (c == nullptr || c->bytes == 0) continue;
    switch (path_of(e, *c)) {
      case Path::device:
      case Path::to_device:
      case Path::to_host:
        continue;
      default:
        return false;
    }
  }
  return true;
}

void issue_parts(Engine& e, const detail::Work& work, bool* launched) {
  for (const detail::WorkPart& part : work.parts) {
    if (const auto* c = std::get_if<detail::CopyWork>(&part)) {
      issue_copy(e, *c);
    } else {
      issue_run(e, std::get<detail::RunWork>(part));
      *launched = true;
    }
  }
}

void finish_issue(Engine& e, detail::Work work, bool launched) {
  CUevent ev = nullptr;
  {
    std::lock_guard lock(e.mu);
    checked(e.take_event_locked(&ev));
  }
  if (Outcome o = check(e.api, e.gpu.name, e.api.cuEventRecord, ev, e.stream); !o) {
    std::lock_guard lock(e.mu);
    e.spare_events.push_back(ev);
    fail(o);
  }
  const std::uint64_t value = work.value;
  {
    std::lock_guard lock(e.mu);
    if (!e.stopping) {
      e.inflight.push_back(InFlight{value, ev, launched, std::move(work)});
      e.issued.fetch_add(1, std::memory_order_release);
      // While a poller looks, the completion thread rests until the poller's lease ends, and
      // waking it would only take the core from the poller; asleep with no deadline, it is woken.
      if (e.completion_asleep || !polled(e)) e.inflight_cv.notify_one();
      return;
    }
    e.spare_events.push_back(ev);
  }
  // Stopped meanwhile: nobody reports this work; `work` lets its buffers go here, outside the lock.
}

}  // namespace rig::backends::cuda
