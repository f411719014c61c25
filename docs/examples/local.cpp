// A complete controller on local devices: load a program on every SIM device and the host, copy
// inputs in, run saxpy, copy the result back and check every element. docs/local.md walks through
// it. Usage: rig-example-local SAXPY.rig
#include <cmath>
#include <cstdio>
#include <vector>

#include "rig/program.hpp"
#include "rig/rig.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SAXPY.rig\n", argv[0]);
    return 2;
  }
  auto program = rig::Program::read(argv[1]);
  if (!program) {
    std::fprintf(stderr, "%s\n", program.error().c_str());
    return 1;
  }

  constexpr std::size_t n = 1 << 20;
  constexpr float a = 2.5f;
  std::vector<float> x(n), y(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = 1.0f;
  }
  // This process's memory as buffers of the host device, without a copy.
  const rig::Buffer host_x = rig::Buffer::borrow(x.data(), n * sizeof(float));
  const rig::Buffer host_y = rig::Buffer::borrow(y.data(), n * sizeof(float));
  const rig::Buffer host_out = rig::Buffer::borrow(out.data(), n * sizeof(float));

  std::vector<rig::Device> devices = rig::open(rig::Kind::sim);
  devices.push_back(rig::host());
  int failures = 0;
  for (const rig::Device& d : devices) {
    auto image = rig::load(d, *program);
    if (!image) {
      std::fprintf(stderr, "%s\n", image.error().c_str());
      return 1;
    }
    // Buffers on the device; the copies and the run are ordered by the memory they use, so the
    // run waits for both inputs and the copy back waits for the run, with no waits here.
    const rig::Buffer dx = rig::Buffer::make(d, n * sizeof(float));
    const rig::Buffer dy = rig::Buffer::make(d, n * sizeof(float));
    rig::copy(dx, host_x);
    rig::copy(dy, host_y);
    rig::submit(
        d, rig::Run{*image,
                    "saxpy",
                    rig::Shape::linear(1),
                    {rig::Arg::word(n), rig::Arg::f32(a), rig::Arg::in(dx), rig::Arg::inout(dy)}});
    rig::copy(host_out, dy).wait();

    // The packed code may fuse the multiply and add (the x86-64-v3 level has FMA), so each
    // element must equal one of the two correctly rounded results.
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float plain = a * x[i] + y[i];
      wrong += out[i] != plain && out[i] != std::fma(a, x[i], y[i]);
    }
    std::printf("%-6s arch %-10s budget %5llu MiB: saxpy over %zu floats, %zu wrong\n",
                d.name().c_str(), d.arch().c_str(),
                static_cast<unsigned long long>(d.budget() >> 20), n, wrong);
    failures += wrong != 0;
  }
  std::printf(failures == 0 ? "every element checked on every device\n" : "FAILED\n");
  return failures == 0 ? 0 : 1;
}
