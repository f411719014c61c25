// Finding the GPUs: primary contexts, arch, memory, peer access; the pinned host allocator and its
// cache of freed blocks.
#include "backends/cuda/gpus.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <new>
#include <unordered_map>

#include "backends/host/host.hpp"

namespace rig::backends::cuda {
namespace {

// The GPU whose context pins host memory for rig's host buffers (portable, so every GPU's DMA
// engines can use it). Set once, before the allocator is installed.
const Gpu* pinning_gpu = nullptr;
const Api* pinning_api = nullptr;

void* pin(std::size_t bytes) noexcept {
  ContextScope scope(*pinning_api, pinning_gpu->context);
  void* p = nullptr;
  // Portable: usable by every context. Device-mapped: under unified addressing a kernel given a
  // host buffer's address reads and writes it in place.
  const CUresult r = pinning_api->cuMemHostAlloc.fn(
      &p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  return r == CUDA_SUCCESS ? p : nullptr;
}

void unpin(void* p) noexcept {
  ContextScope scope(*pinning_api, pinning_gpu->context);
  pinning_api->cuMemFreeHost.fn(p);
}

// Freed pinned blocks kept for reuse (gpus.hpp says why and how much). Owner: the process (never
// destroyed, like the driver table: host buffers may be freed during static destruction).
// Threads: any, under mu.
struct PinnedCache {
  static constexpr std::size_t classes =
      std::bit_width(pinned_cache_block_bytes_max / pinned_cache_block_bytes_min);

  std::mutex mu;
  std::unordered_map<void*, std::size_t> class_of;  // every block of a class, in use or kept
  std::array<std::vector<void*>, classes> kept;     // freed blocks by class, the latest last
};

PinnedCache& pinned_cache() {
  static PinnedCache* const c = new PinnedCache();
  return *c;
}

std::size_t class_bytes(std::size_t c) noexcept {
  return pinned_cache_block_bytes_min << c;
}

void* pinned_allocate(std::size_t bytes) noexcept {
  if (bytes > pinned_cache_block_bytes_max) return pin(bytes);
  const std::size_t c = std::bit_width((std::max(bytes, pinned_cache_block_bytes_min) - 1) /
                                       pinned_cache_block_bytes_min);
  PinnedCache& cache = pinned_cache();
  {
    std::lock_guard lock(cache.mu);
    if (!cache.kept[c].empty()) {
      void* p = cache.kept[c].back();
      cache.kept[c].pop_back();
      return p;
    }
  }
  void* p = pin(class_bytes(c));  // not under the lock: pinning is the slow part
  if (p == nullptr) return nullptr;
  try {
    std::lock_guard lock(cache.mu);
    cache.class_of.emplace(p, c);
  } catch (const std::bad_alloc&) {
    unpin(p);
    return nullptr;
  }
  return p;
}

void pinned_release(void* p) noexcept {
  PinnedCache& cache = pinned_cache();
  {
    std::lock_guard lock(cache.mu);
    const auto it = cache.class_of.find(p);
    if (it != cache.class_of.end()) {
      auto& kept = cache.kept[it->second];
      if ((kept.size() + 1) * class_bytes(it->second) <= pinned_cache_class_bytes_max) {
        try {
          kept.push_back(p);
          return;
        } catch (const std::bad_alloc&) {
          // No room to remember it: it goes back to the driver like any block beyond the limit.
        }
      }
      cache.class_of.erase(it);
    }
  }
  unpin(p);
}

Result<Gpus> find_gpus(const Api& api) {
  Gpus out;
  out.api = &api;
  int count = 0;
  if (const CUresult r = api.cuDeviceGetCount.fn(&count); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE) return out;
    return Error(failure_text(api, "CUDA", "cuDeviceGetCount", r));
  }
  for (int i = 0; i < count; ++i) {
    Gpu g;
    g.ordinal = i;
    g.name = "CUDA:" + std::to_string(i);
    auto checked = [&](Outcome o) -> Result<Unit> {
      if (!o) return Error(o.why);
      return Unit{};
    };
    int major = 0;
    int minor = 0;
    std::size_t bytes = 0;
    for (auto r :
         {checked(check(api, g.name, api.cuDeviceGet, &g.device, i)),
          checked(check(api, g.name, api.cuDeviceGetAttribute, &major,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g.device)),
          checked(check(api, g.name, api.cuDeviceGetAttribute, &minor,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g.device)),
          checked(check(api, g.name, api.cuDeviceTotalMem, &bytes, g.device)),
          checked(check(api, g.name, api.cuDevicePrimaryCtxRetain, &g.context, g.device))}) {
      if (!r) return Error("CUDA: " + r.error());
    }
    g.sm = major * 10 + minor;
    g.arch = "sm_" + std::to_string(g.sm);
    g.memory_bytes = bytes;
    g.peer.assign(static_cast<std::size_t>(count), false);
    g.peer[static_cast<std::size_t>(i)] = true;
    out.list.push_back(std::move(g));
  }
  // Peer access: where the hardware allows it, enabled once for the life of the contexts. A pair
  // that refuses simply does not reach; copies between them go through the host.
  for (Gpu& a : out.list) {
    for (const Gpu& b : out.list) {
      if (&a == &b) continue;
      int can = 0;
      if (api.cuDeviceCanAccessPeer.fn(&can, a.device, b.device) != CUDA_SUCCESS || can == 0) {
        continue;
      }
      ContextScope scope(api, a.context);
      const CUresult r = api.cuCtxEnablePeerAccess.fn(b.context, 0);
      a.peer[static_cast<std::size_t>(b.ordinal)] =
          r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    }
  }
  return out;
}

}  // namespace

const Result<const Gpus*>& gpus() {
  // Never destroyed, like the driver table: device threads may use it while the process exits.
  static const Result<const Gpus*>* const found = []() -> Result<const Gpus*>* {
    const Result<const Api*>& api = driver();
    if (!api) return new Result<const Gpus*>(Error(api.error()));
    auto g = find_gpus(**api);
    if (!g) return new Result<const Gpus*>(Error(g.error()));
    const Gpus* list = new Gpus(std::move(*g));
    if (!list->list.empty()) {
      pinning_api = list->api;
      pinning_gpu = &list->list.front();
      install_pinned_allocator(PinnedAllocator{pinned_allocate, pinned_release});
    }
    return new Result<const Gpus*>(list);
  }();
  return *found;
}

int sm_of(const std::string& arch) noexcept {
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 5) return 0;
  int sm = 0;
  std::size_t i = 3;
  for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) sm = sm * 10 + (arch[i] - '0');
  if (i == 3 || i - 3 > 4) return 0;
  const std::string_view rest = std::string_view(arch).substr(i);
  return rest.empty() || rest == "a" || rest == "f" ? sm : 0;
}

}  // namespace rig::backends::cuda
