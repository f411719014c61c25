// The GPU suite through an agent: a rigd on 127.0.0.1 (port 0) serving this machine's GPUs, and
// this process as the controller, using them as CUDA:N@127.0.0.1:PORT. Exits 77 (a skip, to meson)
// where there is no GPU. The figures case measures the same operations on the local GPU in this
// process, so that each remote figure stands beside its local one from the same run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/gpu_support.hpp"
#include "backends/cuda/support.hpp"
#include "rig/cuda.hpp"
#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"
#include "support/job_fixtures.hpp"

using rig::test::Rigd;

namespace {

using Clock = rig::test::GpuClock;
using rig::test::fill;
using rig::test::load_ok;
using rig::test::median;
using rig::test::ptx_only;
using rig::test::same_as_fill;
using rig::test::saxpy_and_check;
using rig::test::saxpy_program;
using rig::test::us_since;

// A rigd serving the host and the GPUs of this machine, and this process's job on it, closed on
// the way out of a test case that ends early (a process has one job at a time).
struct Agent {
  std::string key = rig::test::make_key_file("gpu");
  Rigd rigd{key, {"--kinds", "CPU,CUDA"}};
  rig::remote::Job job;

  ~Agent() {
    if (job) job.close();
  }

  rig::remote::Job& start() {
    if (job) job.close();
    auto j = rig::remote::connect(rig::test::load_key(key), {rigd.address()});
    REQUIRE_MESSAGE(j.ok(), (j.ok() ? "" : j.error()));
    job = *j;
    return job;
  }
};

rig::Device remote_gpu(const rig::remote::Job& job) {
  auto d = rig::remote::devices(job.hosts().at(0), "CUDA");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error()));
  return d->front();
}

}  // namespace

TEST_CASE("through rigd: copies of 1 B to 1 GiB, both ways and on the agent, every byte") {
  Agent agent;
  auto& job = agent.start();
  const rig::Device g = remote_gpu(job);
  std::printf("through rigd: %s, arch %s, budget %.1f GiB\n", g.name().c_str(), g.arch().c_str(),
              static_cast<double>(g.budget()) / (1u << 30));
  const rig::Device remote_host = job.hosts()[0];
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{4096},
                        std::size_t{65537}, std::size_t{1} << 20, (std::size_t{16} << 20) + 3,
                        std::size_t{256} << 20, std::size_t{1} << 30}) {
    CAPTURE(n);
    std::vector<std::byte> in(n), out(n + 2, std::byte{0xA5});
    fill(in.data(), n, n);
    const rig::Buffer a = rig::Buffer::make(g, n);
    const rig::Buffer b = rig::Buffer::make(g, n);
    const rig::Buffer h = rig::Buffer::make(remote_host, n);  // pinned, in the agent
    // This process -> GPU -> GPU -> the agent's memory -> GPU (over the first buffer, which the
    // second copy must have read) -> this process; no waits between.
    rig::copy(a, rig::Buffer::borrow(in.data(), n));
    rig::copy(b, a);
    rig::copy(h, b);
    rig::copy(a, h);
    rig::copy(rig::Buffer::borrow(out.data() + 1, n), a).wait();
    CHECK(same_as_fill(out.data() + 1, n, n));
    CHECK((out[0] == std::byte{0xA5} && out[n + 1] == std::byte{0xA5}));
  }
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("through rigd: saxpy from a rig-packed .cu, cubin and PTX, every element") {
  const auto program = saxpy_program();
  if (!program) {
    MESSAGE("skipped: RIG_TEST_SAXPY_CU_RIG is not set (the build had no nvcc)");
    return;
  }
  Agent agent;
  auto& job = agent.start();
  const rig::Device g = remote_gpu(job);
  saxpy_and_check(g, *program, (std::size_t{1} << 24) + 5);
  saxpy_and_check(g, ptx_only(*program), (std::size_t{1} << 24) + 5);
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("through rigd: ordering between copies and runs, across machines, no waits between") {
  Agent agent;
  auto& job = agent.start();
  const rig::Device g = remote_gpu(job);
  const rig::Device sim =
      rig::sim::open({.latency_min_ns = 2'000'000, .latency_max_ns = 2'000'000});
  const rig::Image image = load_ok(g, rig::test::ptx_kernels());
  const std::size_t n = std::size_t{1} << 20;  // u32 elements
  const auto shape = rig::Shape::linear(static_cast<std::uint32_t>(n / 256), 256);
  const rig::Buffer a = rig::Buffer::make(g, n * 4);
  const rig::Buffer b = rig::Buffer::make(g, n * 4);
  const rig::Buffer h = rig::Buffer::make(job.hosts()[0], n * 4);  // the agent's memory
  const rig::Buffer s = rig::Buffer::make(sim, n * 4);             // a device of this process
  std::vector<std::uint32_t> mine(n), out(n), out2(n);
  const rig::Buffer here = rig::Buffer::borrow(mine.data(), n * 4);
  const rig::Buffer from_sim = rig::Buffer::borrow(out.data(), n * 4);
  const rig::Buffer from_h = rig::Buffer::borrow(out2.data(), n * 4);
  for (std::uint32_t round = 0; round < 10; ++round) {
    const std::uint32_t v = 1000u + 2 * round;
    rig::submit(
        g, rig::Run{
               image, "fill_u32", shape, {rig::Arg::word(n), rig::Arg::word(v), rig::Arg::out(a)}});
    rig::copy(b, a);     // the GPU, after the fill
    rig::copy(h, b);     // the agent's memory, after the GPU's copy
    rig::copy(here, h);  // this process's memory, after that
    rig::copy(s, here);  // the SIM, only once those bytes are here
    rig::submit(g, rig::Run{image,
                            "fill_u32",
                            shape,
                            {rig::Arg::word(n), rig::Arg::word(v + 1), rig::Arg::out(b)}});
    rig::copy(h, b);  // only once the copy to this process has read h
    const rig::Fence f1 = rig::copy(from_sim, s);
    const rig::Fence f2 = rig::copy(from_h, h);
    f1.wait();
    f2.wait();
    bool ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) ok = out[i] == v && out2[i] == v + 1;
    CHECK(ok);
  }
  rig::close(sim);
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE("through rigd: a trapping kernel fails the job with 719; rigd serves the next job") {
  Agent agent;
  pid_t first = 0;
  std::string agent_cause;
  {
    auto& job = agent.start();
    first = agent.rigd.job_pid(1);
    const rig::Device g = remote_gpu(job);
    const rig::Image image = load_ok(g, rig::test::ptx_kernels());
    const auto t0 = Clock::now();
    rig::submit(g, rig::Run{image, "trap", rig::Shape::linear(1), {}});
    const auto cause = rig::test::wait_for_failure(job, t0, 30);
    REQUIRE(cause.has_value());
    std::printf("through rigd: trap: the job failed after %.1f ms: %s\n", us_since(t0) / 1e3,
                cause->c_str());
    const std::string prefix = agent.rigd.name() + " aborted: ";
    CHECK(cause->starts_with(prefix + "CUDA:0: cu"));
    CHECK(cause->find(": CUDA_ERROR_LAUNCH_FAILED (719)") != std::string::npos);
    CHECK_THROWS_WITH_AS(rig::Buffer::make(g, 64), cause->c_str(), rig::Lost);
    agent_cause = cause->substr(prefix.size());
    const auto end = agent.rigd.job_end(1, 30'000);
    std::printf("through rigd: rigd logged: %s\n", end.value_or("(nothing)").c_str());
    CHECK(end.value_or("").ends_with("job 1: failed " + agent_cause));
    CHECK((::kill(first, 0) != 0 && errno == ESRCH));
    job.close();
  }
  // The same rigd, the next job: a fresh process, whose GPU works.
  auto& job = agent.start();
  const pid_t second = agent.rigd.job_pid(2);
  CHECK(second != first);
  const rig::Device g = remote_gpu(job);
  const std::size_t n = std::size_t{64} << 20;
  std::vector<std::byte> in(n), out(n);
  fill(in.data(), n, 5);
  const rig::Buffer a = rig::Buffer::make(g, n);
  rig::copy(a, rig::Buffer::borrow(in.data(), n));
  rig::copy(rig::Buffer::borrow(out.data(), n), a).wait();
  CHECK(same_as_fill(out.data(), n, 5));
  if (const auto program = saxpy_program()) saxpy_and_check(g, *program, 1'000'003);
  CHECK_FALSE(job.failed());
  job.close();
  CHECK(agent.rigd.job_end(2).value_or("").ends_with("job 2: closed"));
  std::printf("through rigd: the next job, in process %d (the lost one's was %d), worked on %s\n",
              static_cast<int>(second), static_cast<int>(first), g.name().c_str());
}

TEST_CASE("through rigd: figures, each beside the local GPU's") {
  Agent agent;
  auto& job = agent.start();
  const rig::Device g = remote_gpu(job);
  const rig::Device local = rig::cuda::open()->front();
  const rig::Image remote_image = load_ok(g, rig::test::ptx_kernels());
  const rig::Image local_image = load_ok(local, rig::test::ptx_kernels());
  const int rounds = 2000;
  std::printf("figures: %s through rigd on loopback, beside %s in this process\n", g.name().c_str(),
              local.name().c_str());
  std::printf("  %-52s %12s %12s\n", "submit-to-reached, median of 2000", "local", "through rigd");

  // Memory on each side: the GPU's, pinned host memory (in this process for the local figures,
  // in the agent for the remote ones: a remote host buffer), and this process's plain memory.
  const rig::Buffer ldev = rig::Buffer::make(local, 64);
  const rig::Buffer rdev = rig::Buffer::make(g, 64);
  const rig::Buffer lpinned = rig::Buffer::make(rig::host(), 64);
  const rig::Buffer rpinned = rig::Buffer::make(job.hosts()[0], 64);
  std::vector<std::byte> plain_bytes(64);
  const rig::Buffer plain = rig::Buffer::borrow(plain_bytes.data(), 64);
  auto latency = [&](const rig::Device& d, const rig::Part& part) {
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      d.wait(rig::submit(d, part));
      t.push_back(us_since(t0));
    }
    return median(t);
  };
  auto row = [](const char* what, double local_us, double remote_us) {
    std::printf("  %-52s %9.1f us %9.1f us\n", what, local_us, remote_us);
  };
  auto copy_part = [](const rig::Buffer& dst, const rig::Buffer& src) {
    return rig::Part{rig::Copy{dst, 0, src, 0, 64}};
  };
  row("64 B to the GPU, pinned (remote: agent's host buffer)",
      latency(local, copy_part(ldev, lpinned)), latency(g, copy_part(rdev, rpinned)));
  row("64 B from the GPU, pinned (remote: agent's host buffer)",
      latency(local, copy_part(lpinned, ldev)), latency(g, copy_part(rpinned, rdev)));
  row("64 B to the GPU from this process's plain memory", latency(local, copy_part(ldev, plain)),
      latency(g, copy_part(rdev, plain)));
  row("64 B from the GPU to this process's plain memory", latency(local, copy_part(plain, ldev)),
      latency(g, copy_part(plain, rdev)));
  auto tiny = [](const rig::Image& image, const rig::Buffer& out) {
    return rig::Part{rig::Run{image,
                              "fill_u32",
                              rig::Shape::linear(1),
                              {rig::Arg::word(1), rig::Arg::word(1), rig::Arg::out(out)}}};
  };
  row("tiny kernel (fill_u32 of one element)", latency(local, tiny(local_image, ldev)),
      latency(g, tiny(remote_image, rdev)));

  const std::size_t big = std::size_t{256} << 20;
  std::printf("  %-52s %12s %12s\n", "256 MiB copies, median of 5", "local", "through rigd");
  const rig::Buffer lbig = rig::Buffer::make(local, big);
  const rig::Buffer rbig = rig::Buffer::make(g, big);
  const rig::Buffer lpinned_big = rig::Buffer::make(rig::host(), big);
  const rig::Buffer rpinned_big = rig::Buffer::make(job.hosts()[0], big);
  std::vector<std::byte> plain_big_bytes(big, std::byte{1});
  const rig::Buffer plain_big = rig::Buffer::borrow(plain_big_bytes.data(), big);
  std::memset(lpinned_big.access().data(), 1, big);
  rig::copy(rpinned_big, plain_big).wait();
  auto throughput = [&](const rig::Buffer& dst, const rig::Buffer& src) {
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      rig::copy(dst, src).wait();
      t.push_back(us_since(t0));
    }
    return static_cast<double>(big) / median(t) / 1e3;
  };
  auto rate_row = [](const char* what, double local_gbs, double remote_gbs) {
    std::printf("  %-52s %7.1f GB/s %7.1f GB/s\n", what, local_gbs, remote_gbs);
  };
  rate_row("to the GPU, pinned (remote: agent's host buffer)", throughput(lbig, lpinned_big),
           throughput(rbig, rpinned_big));
  rate_row("from the GPU, pinned (remote: agent's host buffer)", throughput(lpinned_big, lbig),
           throughput(rpinned_big, rbig));
  rate_row("to the GPU from this process's plain memory", throughput(lbig, plain_big),
           throughput(rbig, plain_big));
  rate_row("from the GPU to this process's plain memory", throughput(plain_big, lbig),
           throughput(plain_big, rbig));
  CHECK_FALSE(job.failed());
  job.close();
}

int main(int argc, char** argv) {
  return rig::test::gpu_suite_main(argc, argv);
}
