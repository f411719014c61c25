// The CUDA backend in a build made without the toolkit's headers: there are no CUDA devices, and
// opening them says why.
#include "backends/cuda/cuda.hpp"

namespace rig::backends {

Result<std::vector<std::shared_ptr<detail::DeviceCore>>> make_cuda_devices() {
  return Error(
      "CUDA: this rig was built without the CUDA toolkit headers (meson option toolkit_include)");
}

bool is_cuda(const detail::DeviceCore&) noexcept {
  return false;
}

}  // namespace rig::backends
