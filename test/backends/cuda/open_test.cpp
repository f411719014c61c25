// Opening CUDA devices without a usable driver: no devices, a reason, no crash. Each case runs in a
// process of its own, with the environment meson gives it (the driver is loaded once a process).
#include <doctest/doctest.h>

#include "rig/cuda.hpp"
#include "rig/rig.hpp"

TEST_CASE("no driver library") {
  CHECK(rig::open(rig::Kind::cuda).empty());
  auto r = rig::cuda::open();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().rfind("CUDA: the driver library /nonexistent/libcuda.so.1 cannot be opened (",
                        0) == 0);
  CHECK(r.error().find("RIG_CUDA_LIB names another path") != std::string::npos);
  // Everything else still works.
  CHECK(rig::open(rig::Kind::sim).size() == 2);
}

TEST_CASE("cuInit fails") {
  auto r = rig::cuda::open();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().find(": driver: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is "
                       "detected") != std::string::npos);
  CHECK(rig::open(rig::Kind::cuda).empty());
}
