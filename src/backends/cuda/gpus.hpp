// This machine's GPUs as the CUDA backend holds them for the life of the process: found once,
// each with its primary context retained and peer access enabled between those that allow it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backends/cuda/api.hpp"
#include "rig/result.hpp"

namespace rig::backends::cuda {

// One GPU. Owner: Gpus. Threads: any, read only. Lifetime: the process's (the primary context is
// never released: host memory pinned through it and modules loaded into it would go with it).
struct Gpu {
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;  // "CUDA:0"
  std::string arch;  // "sm_90"
  int sm = 0;        // 90
  std::uint64_t memory_bytes = 0;
  std::vector<bool> peer;  // by ordinal: whether this GPU's work may use that GPU's memory
};

// Owner: the process (gpus() makes it once). Threads: any, read only.
struct Gpus {
  const Api* api = nullptr;
  std::vector<Gpu> list;
};

// The process's GPUs, found on the first call; every later call returns the same outcome. Error
// when the driver cannot be loaded or a GPU cannot be set up; an empty list on a machine whose
// driver reports no GPU (CUDA_ERROR_NO_DEVICE is no error here). Installs the pinned host
// allocator (host.hpp) once there is a GPU.
const Result<const Gpus*>& gpus();

// Pinning host memory costs far more than using it: on an H200 machine (a VM) cuMemHostAlloc of
// 64 bytes took 0.5-1.4 ms and cuMemFreeHost 0.2-0.5 ms, more than ten times a small copy's whole
// trip through an agent, which stages every copy from its controller in a new host buffer. So the
// pinned allocator keeps freed blocks up to pinned_cache_block_bytes_max for reuse, in size classes
// of powers of two from pinned_cache_block_bytes_min (a request takes the smallest class that
// holds it), each class holding at most pinned_cache_class_bytes_max of them (worst case, 11
// classes: 88 MiB kept pinned); a freed block beyond that, or larger, goes back to the driver.
inline constexpr std::size_t pinned_cache_block_bytes_min = std::size_t{4} << 10;  // 4 KiB, a page
inline constexpr std::size_t pinned_cache_block_bytes_max = std::size_t{4} << 20;  // 4 MiB
inline constexpr std::size_t pinned_cache_class_bytes_max = std::size_t{8} << 20;  // 8 MiB

// The SM number of an arch name: 90 for "sm_90" and "sm_90a"; 0 for anything else.
int sm_of(const std::string& arch) noexcept;

// Makes `context` current on this thread for the scope and restores what was current before, so
// that rig never changes the context an application's own CUDA code runs in.
class ContextScope {
 public:
  ContextScope(const Api& api, CUcontext context) noexcept : api_(api) {
    pushed_ = api_.cuCtxPushCurrent.fn(context) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) api_.cuCtxPopCurrent.fn(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Api& api_;
  bool pushed_ = false;
};

}  // namespace rig::backends::cuda
