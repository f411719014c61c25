// What the two GPU suites share (the backend's, test/backends/cuda/gpu_test.cpp, and the one
// through a rigd, test/remote/gpu_test.cpp): byte patterns fast enough for 1 GiB, timing, saxpy
// checked element by element, and the main that skips (exit 77) where there is no GPU.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cuda/support.hpp"
#include "rig/cuda.hpp"
#include "rig/program.hpp"
#include "rig/rig.hpp"

namespace rig::test {

using GpuClock = std::chrono::steady_clock;

inline Image load_ok(const Device& d, const Program& p) {
  auto image = load(d, p);
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  return *image;
}

// 64-bit words that depend on `seed` and the offset (xorshift), then bytes for a tail: fill()
// writes them, same_as_fill() checks them.
class WordPattern {
 public:
  explicit WordPattern(std::uint64_t seed) : seed_(seed), x_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  std::uint64_t next_word() {
    x_ ^= x_ << 13;
    x_ ^= x_ >> 7;
    x_ ^= x_ << 17;
    return x_;
  }
  std::byte tail_byte(std::size_t i) const { return static_cast<std::byte>(seed_ + i); }

 private:
  std::uint64_t seed_;
  std::uint64_t x_;
};

inline void fill(std::byte* p, std::size_t n, std::uint64_t seed) {
  WordPattern w(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t x = w.next_word();
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = w.tail_byte(i);
}

inline bool same_as_fill(const std::byte* p, std::size_t n, std::uint64_t seed) {
  WordPattern w(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t x = w.next_word();
    if (std::memcmp(p + i, &x, 8) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != w.tail_byte(i)) return false;
  }
  return true;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double us_since(GpuClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(GpuClock::now() - t0).count();
}

// The rig-packed saxpy.cu, or nothing where the build had no nvcc (RIG_TEST_SAXPY_CU_RIG unset).
inline std::optional<Program> saxpy_program() {
  const char* path = std::getenv("RIG_TEST_SAXPY_CU_RIG");
  if (path == nullptr) return std::nullopt;
  auto program = Program::read(path);
  REQUIRE_MESSAGE(program.ok(), (program.ok() ? "" : program.error()));
  return *program;
}

// The PTX target of `p` alone, for a load that JIT-compiles it.
inline Program ptx_only(const Program& p) {
  std::vector<TargetSpec> targets;
  for (const Target& t : p.targets()) {
    if (t.format != TargetFormat::cuda_ptx) continue;
    targets.push_back({t.format, t.arch, {t.payload.begin(), t.payload.end()}});
  }
  REQUIRE(targets.size() == 1);
  return program_of(targets);
}

// saxpy of `program` on `d`, n elements, every one checked against the host's result bit for bit.
inline void saxpy_and_check(const Device& d, const Program& program, std::size_t n) {
  std::vector<float> x(n), y(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.25f;
    y[i] = 1.0f / static_cast<float>(i + 1);
  }
  const float a = 2.5f;
  const Image image = load_ok(d, program);
  const Buffer dx = Buffer::make(d, n * 4);
  const Buffer dy = Buffer::make(d, n * 4);
  copy(dx, Buffer::borrow(x.data(), n * 4));
  copy(dy, Buffer::borrow(y.data(), n * 4));
  submit(d, Run{image,
                "saxpy",
                Shape::linear(static_cast<std::uint32_t>((n + 255) / 256), 256),
                {Arg::word(n), Arg::f32(a), Arg::in(dx), Arg::inout(dy)}});
  copy(Buffer::borrow(out.data(), n * 4), dy).wait();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float expect = a * x[i] + y[i];
    if (std::memcmp(&expect, &out[i], 4) != 0) ++wrong;
  }
  CHECK(wrong == 0);
}

// A GPU suite's main: exit 77 (a skip, to meson) where this machine has no usable GPU.
inline int gpu_suite_main(int argc, char** argv) {
  auto g = cuda::open();
  if (!g.ok() || g->empty()) {
    std::printf("skipped: no CUDA device here (%s)\n",
                g.ok() ? "the driver reports no GPU" : g.error().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace rig::test
