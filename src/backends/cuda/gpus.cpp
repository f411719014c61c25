// Finding the GPUs: primary contexts, arch, memory, peer access; the pinned host allocator.
#include "backends/cuda/gpus.hpp"

#include "backends/host/host.hpp"

namespace rig::backends::cuda {
namespace {

// The GPU whose context pins host memory for rig's host buffers (portable, so every GPU's DMA
// engines can use it). Set once, before the allocator is installed.
const Gpu* pinning_gpu = nullptr;
const Api* pinning_api = nullptr;

void* pinned_allocate(std::size_t bytes) noexcept {
  ContextScope scope(*pinning_api, pinning_gpu->context);
  void* p = nullptr;
  // Portable: usable by every context. Device-mapped: under unified addressing a kernel given a
  // host buffer's address reads and writes it in place.
  const CUresult r = pinning_api->cuMemHostAlloc.fn(
      &p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  return r == CUDA_SUCCESS ? p : nullptr;
}

void pinned_release(void* p) noexcept {
  ContextScope scope(*pinning_api, pinning_gpu->context);
  pinning_api->cuMemFreeHost.fn(p);
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
