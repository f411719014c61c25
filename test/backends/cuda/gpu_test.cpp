// The GPU suite: the CUDA backend on a real GPU. Exits 77 (a skip, to meson) where there is none.
// The trapping-kernel case breaks its context for good, so it runs in a process of its own
// (--test-case='*trap*'); the figures case prints the latencies and throughputs docs/cuda.md
// quotes.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/api.hpp"
#include "backends/cuda/engine.hpp"
#include "backends/cuda/gpu_support.hpp"
#include "backends/cuda/gpus.hpp"
#include "backends/cuda/support.hpp"
#include "core/device.hpp"
#include "rig/cuda.hpp"
#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"

namespace {

using Clock = rig::test::GpuClock;
using rig::test::fill;
using rig::test::load_ok;
using rig::test::median;
using rig::test::same_as_fill;
using rig::test::us_since;

rig::Device gpu() {
  return rig::cuda::open()->front();
}

}  // namespace

TEST_CASE("GPU: the devices") {
  const auto g = *rig::cuda::open();
  for (const rig::Device& d : g) {
    std::printf("%s: arch %s, budget %.1f GiB, reaches the host: %s\n", d.name().c_str(),
                d.arch().c_str(), static_cast<double>(d.budget()) / (1u << 30),
                rig::reaches(d, rig::host()) ? "yes" : "no");
    CHECK(d.arch().rfind("sm_", 0) == 0);
  }
}

TEST_CASE("GPU: copies of 1 B to 1 GiB, both ways, pinned and pageable, every byte") {
  const rig::Device d = gpu();
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{4096},
                        std::size_t{65537}, std::size_t{1} << 20, (std::size_t{16} << 20) + 3,
                        std::size_t{256} << 20, std::size_t{1} << 30}) {
    for (bool pinned : {true, false}) {
      CAPTURE(n);
      CAPTURE(pinned);
      std::vector<std::byte> pageable_in(pinned ? 0 : n), pageable_out(pinned ? 0 : n);
      const rig::Buffer in =
          pinned ? rig::Buffer::make(rig::host(), n) : rig::Buffer::borrow(pageable_in.data(), n);
      const rig::Buffer out =
          pinned ? rig::Buffer::make(rig::host(), n) : rig::Buffer::borrow(pageable_out.data(), n);
      fill(in.access().data(), n, n + pinned);
      std::memset(out.access().data(), 0, n);
      const rig::Buffer a = rig::Buffer::make(d, n);
      const rig::Buffer b = rig::Buffer::make(d, n);
      rig::copy(a, in);
      rig::copy(b, a);  // device to device
      rig::copy(out, b).wait();
      CHECK(same_as_fill(out.access().data(), n, n + pinned));
    }
  }
}

TEST_CASE("GPU: saxpy from a rig-packed .cu, cubin and PTX, every element") {
  const auto program = rig::test::saxpy_program();
  if (!program) {
    MESSAGE("skipped: RIG_TEST_SAXPY_CU_RIG is not set (the build had no nvcc)");
    return;
  }
  // The packed program as it is (the cubin for this GPU if it has one), and its PTX alone (JIT).
  const std::size_t n = (std::size_t{1} << 24) + 5;
  rig::test::saxpy_and_check(gpu(), *program, n);
  rig::test::saxpy_and_check(gpu(), rig::test::ptx_only(*program), n);
}

TEST_CASE("GPU: ordering between copies and runs, across devices, with no waits between") {
  const rig::Device d = gpu();
  const rig::Device sim =
      rig::sim::open({.latency_min_ns = 2'000'000, .latency_max_ns = 2'000'000});
  const rig::Image image = load_ok(d, rig::test::ptx_kernels());
  const std::size_t n = std::size_t{1} << 22;  // u32 elements
  const auto shape = rig::Shape::linear(static_cast<std::uint32_t>(n / 256), 256);
  const rig::Buffer a = rig::Buffer::make(d, n * 4);
  const rig::Buffer b = rig::Buffer::make(d, n * 4);
  const rig::Buffer h = rig::Buffer::make(rig::host(), n * 4);  // pinned
  const rig::Buffer s = rig::Buffer::make(sim, n * 4);
  std::vector<std::uint32_t> out(n), out2(n);
  const rig::Buffer from_sim = rig::Buffer::borrow(out.data(), n * 4);
  const rig::Buffer from_h = rig::Buffer::borrow(out2.data(), n * 4);
  for (std::uint32_t round = 0; round < 10; ++round) {
    const std::uint32_t v = 1000u + 2 * round;
    rig::submit(
        d, rig::Run{
               image, "fill_u32", shape, {rig::Arg::word(n), rig::Arg::word(v), rig::Arg::out(a)}});
    rig::copy(b, a);  // GPU, after the fill
    rig::copy(h, b);  // GPU to pinned host memory
    rig::copy(s, h);  // SIM, after the GPU's copy (its worker waits for the GPU's timeline)
    rig::submit(d, rig::Run{image,
                            "fill_u32",
                            shape,
                            {rig::Arg::word(n), rig::Arg::word(v + 1), rig::Arg::out(b)}});
    rig::copy(h, b);  // GPU, only once the SIM has read h: the feeder waits for the SIM
    const rig::Fence f1 = rig::copy(from_sim, s);
    const rig::Fence f2 = rig::copy(from_h, h);
    f1.wait();
    f2.wait();
    bool ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) ok = out[i] == v && out2[i] == v + 1;
    CHECK(ok);
  }
  rig::close(sim);
}

TEST_CASE("GPU: a trapping kernel loses the device with the CUDA error's name") {
  const rig::Device d = gpu();
  const rig::Image image = load_ok(d, rig::test::ptx_kernels());
  const std::uint64_t v = rig::submit(d, rig::Run{image, "trap", rig::Shape::linear(1), {}});
  std::string cause;
  try {
    d.wait(v);
  } catch (const rig::Lost& e) {
    cause = e.what();
  }
  std::printf("trap: %s lost: %s\n", d.name().c_str(), cause.c_str());
  CHECK(cause.rfind(d.name() + ": cu", 0) == 0);
  CHECK(cause.find("CUDA_ERROR_LAUNCH_FAILED (719)") != std::string::npos);
  CHECK(rig::failure(d) == cause);
  const rig::Buffer buf = rig::Buffer::make(rig::host(), 64);
  CHECK_THROWS_WITH_AS(rig::submit(d, rig::Copy{buf, 0, buf, 0, 64}), cause.c_str(), rig::Lost);
  CHECK_THROWS_WITH_AS(rig::Buffer::make(d, 64), cause.c_str(), rig::Lost);
  // The host, and everything else of the process, goes on.
  const rig::Buffer other = rig::Buffer::make(rig::host(), 64);
  rig::copy(other, buf).wait();
}

TEST_CASE("GPU: figures") {
  const rig::Device d = gpu();
  const rig::Image image = load_ok(d, rig::test::ptx_kernels());
  const int rounds = 2000;
  std::printf("figures on %s (%s), completion poll budget %llu ns:\n", d.name().c_str(),
              d.arch().c_str(),
              static_cast<unsigned long long>(rig::backends::cuda::poll_budget_ns()));
  const rig::Buffer dev = rig::Buffer::make(d, 64);
  const rig::Buffer pinned = rig::Buffer::make(rig::host(), 64);
  std::vector<std::byte> pageable_bytes(64);
  const rig::Buffer pageable = rig::Buffer::borrow(pageable_bytes.data(), 64);
  auto latency = [&](const char* what, auto&& part) {
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      d.wait(rig::submit(d, part));
      t.push_back(us_since(t0));
    }
    std::printf("  %-44s %8.1f us median\n", what, median(t));
  };
  latency("64 B copy to the GPU, pinned", rig::Part{rig::Copy{dev, 0, pinned, 0, 64}});
  latency("64 B copy from the GPU, pinned", rig::Part{rig::Copy{pinned, 0, dev, 0, 64}});
  latency("64 B copy to the GPU, pageable (staged)", rig::Part{rig::Copy{dev, 0, pageable, 0, 64}});
  latency("64 B copy from the GPU, pageable (staged)",
          rig::Part{rig::Copy{pageable, 0, dev, 0, 64}});
  latency("tiny kernel (fill_u32 of one element)",
          rig::Part{rig::Run{image,
                             "fill_u32",
                             rig::Shape::linear(1),
                             {rig::Arg::word(1), rig::Arg::word(1), rig::Arg::out(dev)}}});

  // The same through the driver alone: the floor rig's figures are measured against.
  {
    const auto& g = **rig::backends::cuda::gpus();
    const auto& api = *g.api;
    const auto& gp = g.list.front();
    rig::backends::cuda::ContextScope scope(api, gp.context);
    CUstream s = nullptr;
    CUevent ev = nullptr;
    api.cuStreamCreate.fn(&s, CU_STREAM_NON_BLOCKING);
    api.cuEventCreate.fn(&ev, CU_EVENT_DISABLE_TIMING);
    CUdeviceptr p = 0;
    api.cuMemAlloc.fn(&p, 64);
    void* host = nullptr;
    api.cuMemHostAlloc.fn(&host, 64, 0);
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      api.cuMemcpyHtoDAsync.fn(p, host, 64, s);
      api.cuEventRecord.fn(ev, s);
      while (api.cuEventQuery.fn(ev) == CUDA_ERROR_NOT_READY) {
      }
      t.push_back(us_since(t0));
    }
    std::printf("  %-44s %8.1f us median\n", "driver alone: 64 B pinned copy, event polled",
                median(t));
    t.clear();
    auto fn =
        reinterpret_cast<CUfunction>(const_cast<void*>(image.core()->module->find("fill_u32")));
    std::uint64_t words[3] = {1, 1, p};
    void* params[3] = {&words[0], &words[1], &words[2]};
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      api.cuLaunchKernel.fn(fn, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
      api.cuEventRecord.fn(ev, s);
      while (api.cuEventQuery.fn(ev) == CUDA_ERROR_NOT_READY) {
      }
      t.push_back(us_since(t0));
    }
    std::printf("  %-44s %8.1f us median\n", "driver alone: tiny kernel, event polled", median(t));
    const std::size_t big = std::size_t{256} << 20;
    CUdeviceptr dbig = 0;
    void* hbig = nullptr;
    api.cuMemAlloc.fn(&dbig, big);
    api.cuMemHostAlloc.fn(&hbig, big, 0);
    t.clear();
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      api.cuMemcpyHtoDAsync.fn(dbig, hbig, big, s);
      api.cuEventRecord.fn(ev, s);
      while (api.cuEventQuery.fn(ev) == CUDA_ERROR_NOT_READY) {
      }
      t.push_back(us_since(t0));
    }
    std::printf("  %-44s %8.1f GB/s (256 MiB, median of 5)\n",
                "driver alone: copy to the GPU, pinned",
                static_cast<double>(big) / median(t) / 1e3);
    api.cuMemFreeHost.fn(hbig);
    api.cuMemFree.fn(dbig);
    api.cuMemFreeHost.fn(host);
    api.cuMemFree.fn(p);
    api.cuEventDestroy.fn(ev);
    api.cuStreamDestroy.fn(s);
  }

  const std::size_t big = std::size_t{256} << 20;
  const rig::Buffer dbig = rig::Buffer::make(d, big);
  const rig::Buffer hbig = rig::Buffer::make(rig::host(), big);
  std::vector<std::byte> pbig(big);
  std::memset(pbig.data(), 1, big);
  std::memset(hbig.access().data(), 1, big);
  const rig::Buffer pgbig = rig::Buffer::borrow(pbig.data(), big);
  auto throughput = [&](const char* what, const rig::Buffer& dst, const rig::Buffer& src) {
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      rig::copy(dst, src).wait();
      t.push_back(us_since(t0));
    }
    std::printf("  %-44s %8.1f GB/s (256 MiB, median of 5)\n", what,
                static_cast<double>(big) / median(t) / 1e3);
  };
  throughput("copy to the GPU, pinned", dbig, hbig);
  throughput("copy from the GPU, pinned", hbig, dbig);
  throughput("copy to the GPU, pageable (staged)", dbig, pgbig);
  throughput("copy from the GPU, pageable (staged)", pgbig, dbig);
}

int main(int argc, char** argv) {
  return rig::test::gpu_suite_main(argc, argv);
}
