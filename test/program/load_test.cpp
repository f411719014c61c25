// rig::load and runs of packed host code on the CPU device and on SIM devices: saxpy over a
// million floats checked bit for bit, at every level the processor runs; the launch as the code
// sees it; misuse and load errors with their exact texts.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>

#include "core/arch.hpp"
#include "rig/kernel.h"
#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"
#include "support.hpp"

namespace {

using namespace rig;

Program saxpy_program() {
  auto p = Program::read(rig::test::env_path("RIG_TEST_SAXPY_RIG"));
  REQUIRE(p.ok());
  return *p;
}

Image load_ok(const Device& d, const Program& p) {
  auto image = load(d, p);
  if (!image) FAIL(image.error());
  return *image;
}

// A buffer on `d` holding `data`: host buffers are filled directly, others by a copy from one.
template <typename T>
Buffer upload(const Device& d, const std::vector<T>& data) {
  const std::size_t bytes = data.size() * sizeof(T);
  Buffer staging = Buffer::make(host(), bytes);
  std::memcpy(staging.access().data(), data.data(), bytes);
  if (d == host()) return staging;
  Buffer b = Buffer::make(d, bytes);
  copy(b, staging).wait();
  return b;
}

template <typename T>
std::vector<T> download(const Buffer& b) {
  Buffer staging = Buffer::make(host(), b.size());
  copy(staging, b).wait();
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), staging.access().data(), b.size());
  return out;
}

constexpr std::uint32_t threads_per_block = 256;

Shape cover(std::uint64_t n) {
  return Shape::linear(static_cast<std::uint32_t>((n + threads_per_block - 1) / threads_per_block),
                       threads_per_block);
}

// Runs saxpy with `image` over n elements with launch shape `shape` (the code handles the first
// n that the shape's threads cover) and checks every element of y bit for bit against the same
// arithmetic done here.
void check_saxpy(const Image& image, std::uint64_t n, const Shape& shape, std::uint64_t seed) {
  std::uint64_t covered = 1;
  for (int i = 0; i < 3; ++i) covered *= std::uint64_t{shape.grid[i]} * shape.block[i];
  const Device& d = image.device();
  CAPTURE(d.name());
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : y) v = dist(rng);
  const float a = dist(rng);

  Buffer bx = upload(d, x);
  Buffer by = upload(d, y);
  submit(d, Run{image, "saxpy", shape, {Arg::word(n), Arg::f32(a), Arg::in(bx), Arg::inout(by)}});
  const std::vector<float> got = download<float>(by);

  std::size_t wrong = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    // Built with -ffp-contract=off, like the packed code: a rounded product, then a rounded sum.
    const float want = i < covered ? a * x[i] + y[i] : y[i];
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want)) {
      if (wrong++ < 5) FAIL_CHECK("y[" << i << "] = " << got[i] << ", expected " << want);
    }
  }
  CHECK(wrong == 0);
}

constexpr std::uint64_t million = 1'000'003;  // not a multiple of any block size

TEST_CASE("saxpy from rig pack runs on the CPU device, every element exact") {
  const Program p = saxpy_program();
  check_saxpy(load_ok(host(), p), million, cover(million), 1);
}

TEST_CASE("saxpy from rig pack runs on a SIM device, every element exact") {
  const Device sim = rig::sim::open({});
  CHECK(sim.arch() == "sim");
  const Program p = saxpy_program();
  check_saxpy(load_ok(sim, p), million, cover(million), 2);
  close(sim);
}

TEST_CASE("every level the processor runs computes the same bits") {
  const Program p = saxpy_program();
  std::size_t tried = 0;
  for (const Target& t : p.targets()) {
    const auto& levels = detail::host_isa_levels();
    if (std::find(levels.begin(), levels.end(), t.arch) == levels.end()) continue;
    CAPTURE(t.arch);
    // A program with this level alone, so that loading must pick it.
    const std::vector<TargetSpec> one = {
        {t.format, t.arch, std::vector<std::byte>(t.payload.begin(), t.payload.end())}};
    auto single = Program::parse(write_program(one));
    REQUIRE(single.ok());
    check_saxpy(load_ok(host(), *single), 100'003, cover(100'003), 3);
    ++tried;
  }
  CHECK(tried == detail::host_isa_levels().size());
}

TEST_CASE("the launch shape reaches the code: a shape over fewer elements leaves the rest") {
  const Device sim = rig::sim::open({});
  // 4 blocks of 250 threads: the first 1,000 elements of 10,000.
  check_saxpy(load_ok(sim, saxpy_program()), 10'000, Shape::linear(4, 250), 4);
  // Threads in y and z count too: 2 x 3 x 5 blocks of 7 x 1 x 11 threads are 2,310.
  check_saxpy(load_ok(sim, saxpy_program()), 10'000, Shape{{2, 3, 5}, {7, 1, 11}}, 5);
  close(sim);
}

TEST_CASE("an entry sees its launch exactly as submitted") {
  const Program p = saxpy_program();
  const Device sim = rig::sim::open({});
  for (const Device& d : {host(), sim}) {
    CAPTURE(d.name());
    const Image image = load_ok(d, p);
    Buffer out = Buffer::make(d, 16 * sizeof(std::uint64_t));
    const Shape shape{{2, 3, 4}, {5, 6, 7}};
    submit(d, Run{image,
                  "describe_launch",
                  shape,
                  {Arg::out(out), Arg::word(11), Arg::word(~std::uint64_t{0}), Arg::f32(-2.5f)}});
    const auto got = download<std::uint64_t>(out);
    const std::vector<std::uint64_t> want = {
        2, 3, 4, 5, 6, 7, 4, 0, 11, ~std::uint64_t{0}, std::bit_cast<std::uint32_t>(-2.5f)};
    CHECK(std::vector<std::uint64_t>(got.begin(), got.begin() + 11) == want);
  }
  close(sim);
}

TEST_CASE("runs on a SIM device chain through its memory: fill, fill, add") {
  const Device sim = rig::sim::open({});
  const Image image = load_ok(sim, saxpy_program());
  const std::uint64_t n = 65'537;
  const std::size_t bytes = n * sizeof(std::uint32_t);
  Buffer a = Buffer::make(sim, bytes), b = Buffer::make(sim, bytes), sum = Buffer::make(sim, bytes);
  const Part parts[] = {
      Run{image, "fill_u32", cover(n), {Arg::word(n), Arg::word(7), Arg::out(a)}},
      Run{image, "fill_u32", cover(n), {Arg::word(n), Arg::word(0xffff'fff0u), Arg::out(b)}},
      Run{image, "add_u32", cover(n), {Arg::word(n), Arg::in(a), Arg::in(b), Arg::out(sum)}},
  };
  submit(sim, parts);
  const auto got = download<std::uint32_t>(sum);
  std::size_t wrong = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t want = (7u + std::uint32_t(i)) + (0xffff'fff0u + std::uint32_t(i));
    wrong += got[i] != want;
  }
  CHECK(wrong == 0);
  close(sim);
}

TEST_CASE("an image outlives its Program, and two images of one program are independent") {
  const Device sim = rig::sim::open({});
  Image first, second;
  {
    const Program p = saxpy_program();
    first = load_ok(sim, p);
    second = load_ok(sim, p);
  }
  check_saxpy(first, 1'000, cover(1'000), 6);
  first = Image();
  check_saxpy(second, 1'000, cover(1'000), 7);
  close(sim);
}

std::string misuse_text(const Device& d, const Image& image, const std::string& entry) {
  try {
    submit(d, Run{image, entry, Shape{}, {}});
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST_CASE("running a name that is not an entry is misuse that names it") {
  const Program p = saxpy_program();
  const Device sim = rig::sim::open({});
  for (const Device& d : {host(), sim}) {
    CAPTURE(d.name());
    const Image image = load_ok(d, p);
    for (const char* name :
         {"nope", "hidden_helper", "exported_table", "rig_kernel_abi", "memcpy"}) {
      CHECK(misuse_text(d, image, name) ==
            std::string("rig: part 0: the program has no entry point '") + name + "'");
    }
  }
  close(sim);
}

TEST_CASE("load errors name the device and what is wrong") {
  const Device sim = rig::sim::open({});
  const std::string level = detail::host_isa_levels().back();  // the baseline: every CPU runs it
  auto wrap = [&](std::vector<std::byte> payload) {
    const std::vector<TargetSpec> t = {{TargetFormat::host_elf, level, std::move(payload)}};
    auto p = Program::parse(write_program(t));
    REQUIRE(p.ok());
    return *p;
  };
  const Program none = wrap(rig::test::read_bytes(rig::test::env_path("RIG_TEST_ABI_NONE")));
  const Program wrong = wrap(rig::test::read_bytes(rig::test::env_path("RIG_TEST_ABI_WRONG")));
  const std::vector<TargetSpec> cuda_only = {
      {TargetFormat::cuda_ptx, "sm_80", rig::test::bytes_of(".version 8.0")}};
  auto no_host = Program::parse(write_program(cuda_only));
  REQUIRE(no_host.ok());
  std::string runs;
  for (const auto& l : detail::host_isa_levels()) runs += (runs.empty() ? "" : ", ") + l;

  for (const Device& d : {host(), sim}) {
    CAPTURE(d.name());
    CHECK(load(d, none).error() == d.name() + ": rig.program: the " + level +
                                       " host code does not export rig_kernel_abi (was it built "
                                       "with rig pack?)");
    CHECK(load(d, wrong).error() ==
          d.name() + ": rig.program: the " + level +
              " host code was built for kernel ABI 999, this rig speaks " +
              std::to_string(RIG_KERNEL_ABI));
    CHECK(load(d, *no_host).error() == d.name() +
                                           ": rig.program: no host code for this processor (it "
                                           "runs " +
                                           runs + "; the program has no host code)");
  }
  close(sim);
}

}  // namespace
