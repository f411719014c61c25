// The CUDA Driver API as rig reaches it: one table of entry points, resolved once from the driver
// library at run time, and one checked call path whose failures name the call, the result and the
// device. Only the toolkit's headers are used at compile time; nothing links libcuda or cudart.
#pragma once

#include <cudaTypedefs.h>

#include <string>
#include <string_view>

#include "rig/result.hpp"

namespace rig::backends::cuda {

// One entry point: its function pointer as the driver gave it for the pinned API version, and its
// name for error messages.
template <typename Pfn>
struct Entry {
  Pfn fn = nullptr;
  const char* name = "";
};

// Every entry point rig calls, each with the API version its signature is pinned to. Asking
// cuGetProcAddress for that version means a later driver that changes a signature (as _v2 and
// _v3 variants did) still hands us the one we were compiled for.
//
// The members carry the API's own names. cuda.h defines some of those names as macros (cuMemAlloc
// is cuMemAlloc_v2, and so on); the macro applies alike where a member is declared and where it is
// used, so the code reads as the API does.
#define RIG_CUDA_ENTRIES(X)         \
  X(cuInit, 2000)                   \
  X(cuDriverGetVersion, 2020)       \
  X(cuGetErrorName, 6000)           \
  X(cuGetErrorString, 6000)         \
  X(cuDeviceGetCount, 2000)         \
  X(cuDeviceGet, 2000)              \
  X(cuDeviceGetAttribute, 2000)     \
  X(cuDeviceGetName, 2000)          \
  X(cuDeviceTotalMem, 3020)         \
  X(cuDeviceCanAccessPeer, 4000)    \
  X(cuDevicePrimaryCtxRetain, 7000) \
  X(cuCtxSetCurrent, 4000)          \
  X(cuCtxPushCurrent, 4000)         \
  X(cuCtxPopCurrent, 4000)          \
  X(cuCtxEnablePeerAccess, 4000)    \
  X(cuMemAlloc, 3020)               \
  X(cuMemFree, 3020)                \
  X(cuMemHostAlloc, 2020)           \
  X(cuMemFreeHost, 2000)            \
  X(cuPointerGetAttribute, 4000)    \
  X(cuMemcpyHtoDAsync, 3020)        \
  X(cuMemcpyDtoHAsync, 3020)        \
  X(cuMemcpyDtoDAsync, 3020)        \
  X(cuMemcpyPeerAsync, 4000)        \
  X(cuStreamCreate, 2000)           \
  X(cuStreamDestroy, 4000)          \
  X(cuStreamQuery, 2000)            \
  X(cuStreamWaitEvent, 3020)        \
  X(cuEventCreate, 2000)            \
  X(cuEventDestroy, 4000)           \
  X(cuEventRecord, 2000)            \
  X(cuEventQuery, 2000)             \
  X(cuModuleLoadDataEx, 2010)       \
  X(cuModuleGetFunction, 2000)      \
  X(cuModuleUnload, 2000)           \
  X(cuLaunchKernel, 4000)

// Owner: the process, once loaded (see driver()); tests may build their own. Threads: any, read
// only. Lifetime: the process's, since contexts and pinned memory made through it live that long.
struct Api {
#define RIG_CUDA_MEMBER(name, version) Entry<PFN_##name##_v##version> name;
  RIG_CUDA_ENTRIES(RIG_CUDA_MEMBER)
#undef RIG_CUDA_MEMBER
  int driver_version = 0;  // as cuDriverGetVersion reports it: 13000 for CUDA 13.0
  std::string library;     // the path or name the library was opened by
};

// Where the driver library is looked for: RIG_CUDA_LIB if set, else this soname.
inline constexpr const char* driver_library_default = "libcuda.so.1";
// Drivers older than this lack cuGetProcAddress (CUDA 11.3) and are refused by name.
inline constexpr int driver_version_min = 11030;

// Opens the library at `path`, resolves every entry at its pinned version and calls cuInit(0).
// Error says which step failed and why. On success the library stays open for good.
Result<Api> load_api(const std::string& path);

// The process's driver, loaded on the first call from RIG_CUDA_LIB or libcuda.so.1; every later
// call returns the same outcome, so a machine without a driver is asked once.
const Result<const Api*>& driver();

// "CUDA_ERROR_LAUNCH_FAILED (719): unspecified launch failure", or "CUresult 999" when the driver
// knows no name for the code.
std::string describe(const Api& api, CUresult code);

// A driver call's outcome: success, or the failure's code and its text, "CUDA:0: cuMemAlloc:
// CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
struct Outcome {
  CUresult code = CUDA_SUCCESS;
  std::string why;
  explicit operator bool() const noexcept { return code == CUDA_SUCCESS; }
};

// The text of a failed call on `device`.
std::string failure_text(const Api& api, std::string_view device, const char* call, CUresult code);

// The one checked call path: runs the entry and, on failure, names the call, the result and the
// device in the outcome. Calls whose non-success results are expected (cuEventQuery's
// CUDA_ERROR_NOT_READY) call entry.fn directly and come here only for the unexpected ones.
template <typename Pfn, typename... Args>
Outcome check(const Api& api, std::string_view device, const Entry<Pfn>& entry, Args... args) {
  const CUresult code = entry.fn(args...);
  if (code == CUDA_SUCCESS) return {};
  return Outcome{code, failure_text(api, device, entry.name, code)};
}

}  // namespace rig::backends::cuda
