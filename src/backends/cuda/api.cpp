// Loading the driver library and resolving its entry points; the checked call path's text.
#include "backends/cuda/api.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace rig::backends::cuda {
namespace {

// cuGetProcAddress as CUDA 12 declares it, and the CUDA 11.3 form without the status argument.
using GetProc2 = PFN_cuGetProcAddress_v12000;
using GetProc1 = PFN_cuGetProcAddress_v11030;

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

Result<Api> load_api(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Error("CUDA: the driver library " + path + " cannot be opened (" +
                 (why != nullptr ? why : "no reason given") +
                 "); is the NVIDIA driver installed? RIG_CUDA_LIB names another path");
  }
  // On failure the library stays loaded: what it allocated while rig probed it (its own tables)
  // would otherwise be lost with it, and the process opens it once anyway.
  auto fail = [&](const std::string& why) { return Error("CUDA: " + path + ": " + why); };
  // The driver's own table lookup, so that every entry comes at the version we name.
  auto get2 = reinterpret_cast<GetProc2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto get1 = reinterpret_cast<GetProc1>(dlsym(lib, "cuGetProcAddress"));
  if (get2 == nullptr && get1 == nullptr) {
    return fail("has no cuGetProcAddress: the driver is older than CUDA " +
                version_text(driver_version_min));
  }
  Api api;
  api.library = path;
  std::string missing;
  auto resolve = [&](auto& entry, const char* name, int version) {
    entry.name = name;
    void* fn = nullptr;
    CUresult r;
    if (get2 != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      r = get2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
      if (status != CU_GET_PROC_ADDRESS_SUCCESS) r = CUDA_ERROR_NOT_FOUND;
    } else {
      r = get1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    }
    if (r != CUDA_SUCCESS || fn == nullptr) {
      missing += (missing.empty() ? "" : ", ") + std::string(name) + "@" + std::to_string(version);
      return;
    }
    entry.fn = reinterpret_cast<std::remove_reference_t<decltype(entry.fn)>>(fn);
  };
#define RIG_CUDA_RESOLVE(name, version) resolve(api.name, #name, version);
  RIG_CUDA_ENTRIES(RIG_CUDA_RESOLVE)
#undef RIG_CUDA_RESOLVE
  if (!missing.empty()) return fail("the driver lacks entry points rig needs: " + missing);

  if (const CUresult r = api.cuDriverGetVersion.fn(&api.driver_version); r != CUDA_SUCCESS) {
    return fail(failure_text(api, "driver", "cuDriverGetVersion", r));
  }
  if (api.driver_version < driver_version_min) {
    return fail("driver for CUDA " + version_text(api.driver_version) + ", older than the " +
                version_text(driver_version_min) + " rig needs");
  }
  if (const CUresult r = api.cuInit.fn(0); r != CUDA_SUCCESS) {
    return fail(failure_text(api, "driver", "cuInit", r));
  }
  return api;  // the library stays open: the entries point into it
}

const Result<const Api*>& driver() {
  // Never destroyed: contexts, streams and pinned memory made through the table outlive static
  // destruction order, and a device's threads may still call it while the process exits.
  static const Result<const Api*>* const loaded = [] {
    const char* env = std::getenv("RIG_CUDA_LIB");
    const std::string path = env != nullptr && *env != '\0' ? env : driver_library_default;
    auto api = load_api(path);
    if (!api) return new Result<const Api*>(Error(api.error()));
    return new Result<const Api*>(static_cast<const Api*>(new Api(std::move(*api))));
  }();
  return *loaded;
}

std::string describe(const Api& api, CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName.fn == nullptr || api.cuGetErrorName.fn(code, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    return "CUresult " + std::to_string(static_cast<int>(code));
  }
  std::string out = std::string(name) + " (" + std::to_string(static_cast<int>(code)) + ")";
  if (api.cuGetErrorString.fn != nullptr && api.cuGetErrorString.fn(code, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    out += std::string(": ") + text;
  }
  return out;
}

std::string failure_text(const Api& api, std::string_view device, const char* call, CUresult code) {
  return std::string(device) + ": " + call + ": " + describe(api, code);
}

}  // namespace rig::backends::cuda
