// The randomized check of ordering by memory: thousands of copies and runs across three SIM
// devices with random latencies and the host, compared at the end (and at random host accesses
// along the way) with a model that applies the same operations one after another. Only ordering by
// memory makes the devices' concurrent, reordered execution agree with the model.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "rig/sim.hpp"
#include "support/kernels.hpp"

namespace {

constexpr std::size_t words_per_buffer = 64;
constexpr std::size_t bytes_per_buffer = words_per_buffer * 4;

std::uint64_t seed_from_env() {
  if (const char* s = std::getenv("RIG_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

struct Devices {
  std::vector<rig::Device> all;  // three SIMs, then the host
  std::vector<rig::Image> images;

  Devices() {
    const std::uint64_t max_ns[] = {20'000, 100'000, 5'000};
    for (int i = 0; i < 3; ++i) {
      all.push_back(rig::sim::open({.latency_min_ns = 0,
                                    .latency_max_ns = max_ns[i],
                                    .seed = static_cast<std::uint64_t>(i + 1)}));
    }
    all.push_back(rig::host());
    const rig::Program program = rig::test::test_kernels();
    for (const auto& d : all) images.push_back(*rig::load(d, program));
  }
  ~Devices() {
    for (std::size_t i = 0; i + 1 < all.size(); ++i) rig::close(all[i]);
  }
};

// One thread's share of the test: its own buffers, spread over every device, and their model.
class Walk {
 public:
  Walk(Devices& devices, std::uint64_t seed) : d_(devices), rng_(seed) {
    for (std::size_t dev = 0; dev < d_.all.size(); ++dev) {
      for (int k = 0; k < 3; ++k) {
        buffers_.push_back(rig::Buffer::make(d_.all[dev], bytes_per_buffer));
        device_of_.push_back(dev);
        model_.emplace_back(words_per_buffer, 0u);
      }
    }
    // Start from known contents: zero every buffer through the devices themselves.
    for (std::size_t b = 0; b < buffers_.size(); ++b) fill(b, 0, words_per_buffer, 0);
  }

  void step() {
    const int what = pick(0, 99);
    if (what < 40) {
      random_copy();
    } else if (what < 75) {
      random_mix();
    } else if (what < 85) {
      const std::size_t b = pick_buffer();
      const std::size_t off = pick(0, words_per_buffer - 1);
      fill(b, off, pick(0, words_per_buffer - off), static_cast<std::uint32_t>(rng_()));
    } else if (what < 95) {
      multi_part();
    } else {
      host_access();
    }
  }

  // Copies every buffer to the host and compares it with the model.
  void check_all() {
    std::vector<std::vector<std::uint32_t>> out(buffers_.size(),
                                                std::vector<std::uint32_t>(words_per_buffer));
    std::vector<rig::Fence> fences;
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      fences.push_back(
          rig::copy(rig::Buffer::borrow(out[b].data(), bytes_per_buffer), buffers_[b]));
    }
    for (const auto& f : fences) f.wait();
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      INFO("buffer " << b << " on " << d_.all[device_of_[b]].name());
      REQUIRE(out[b] == model_[b]);
    }
  }

  std::uint64_t submissions() const { return submissions_; }

 private:
  std::size_t pick(std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_);
  }
  std::size_t pick_buffer() { return pick(0, buffers_.size() - 1); }
  std::size_t pick_buffer_on(std::size_t dev) {
    for (;;) {
      const std::size_t b = pick_buffer();
      if (device_of_[b] == dev) return b;
    }
  }
  bool is_host(std::size_t dev) const { return dev == d_.all.size() - 1; }

  struct Range {
    std::size_t dst_off, src_off, count;
  };
  Range pick_range() {
    const std::size_t count = pick(0, words_per_buffer);
    return {pick(0, words_per_buffer - count), pick(0, words_per_buffer - count), count};
  }

  rig::Copy copy_part(std::size_t dst, std::size_t src, const Range& r) {
    return rig::Copy{buffers_[dst], r.dst_off * 4, buffers_[src], r.src_off * 4, r.count * 4};
  }
  void model_copy(std::size_t dst, std::size_t src, const Range& r) {
    std::memmove(model_[dst].data() + r.dst_off, model_[src].data() + r.src_off, r.count * 4);
  }

  rig::Run mix_part(std::size_t dev, std::size_t dst, std::size_t src, const Range& r,
                    std::uint32_t k) {
    return rig::Run{
        d_.images[dev],
        "mix_u32",
        rig::Shape{},
        {rig::Arg::inout(buffers_[dst], r.dst_off * 4), rig::Arg::in(buffers_[src], r.src_off * 4),
         rig::Arg::word(r.count), rig::Arg::word(k)}};
  }
  void model_mix(std::size_t dst, std::size_t src, const Range& r, std::uint32_t k) {
    // The same loop as the kernel, so overlapping ranges of one buffer behave the same.
    std::uint32_t* d = model_[dst].data() + r.dst_off;
    const std::uint32_t* s = model_[src].data() + r.src_off;
    for (std::size_t i = 0; i < r.count; ++i) d[i] = d[i] * 3u + s[i] + k;
  }

  // A source buffer that device `dev` reaches: its own, the host's, or (for a SIM) another SIM's.
  std::size_t pick_source_for(std::size_t dev) {
    if (is_host(dev)) return pick_buffer_on(dev);
    return pick_buffer();
  }

  void random_copy() {
    const std::size_t dst = pick_buffer(), src = pick_buffer();
    const Range r = pick_range();
    if (pick(0, 3) == 0 && !is_host(device_of_[dst]) && !is_host(device_of_[src])) {
      // A third SIM device copies between two others' memory.
      const std::size_t on = pick(0, 2);
      rig::submit(d_.all[on], copy_part(dst, src, r));
    } else {
      rig::copy(buffers_[dst], r.dst_off * 4, buffers_[src], r.src_off * 4, r.count * 4);
    }
    ++submissions_;
    model_copy(dst, src, r);
  }

  void random_mix() {
    const std::size_t dev = pick(0, d_.all.size() - 1);
    const std::size_t dst = pick_buffer_on(dev), src = pick_source_for(dev);
    const Range r = pick_range();
    const auto k = static_cast<std::uint32_t>(rng_());
    rig::submit(d_.all[dev], mix_part(dev, dst, src, r, k));
    ++submissions_;
    model_mix(dst, src, r, k);
  }

  void fill(std::size_t b, std::size_t off, std::size_t count, std::uint32_t v) {
    const std::size_t dev = device_of_[b];
    rig::submit(d_.all[dev], rig::Run{d_.images[dev],
                                      "fill_u32",
                                      rig::Shape{},
                                      {rig::Arg::out(buffers_[b], off * 4), rig::Arg::word(count),
                                       rig::Arg::word(v)}});
    ++submissions_;
    std::fill_n(model_[b].begin() + off, count, v);
  }

  void multi_part() {
    const std::size_t dev = pick(0, 2);  // a SIM device: it reaches every buffer
    std::vector<rig::Part> parts;
    const std::size_t n = pick(2, 4);
    for (std::size_t i = 0; i < n; ++i) {
      const Range r = pick_range();
      if (pick(0, 1) == 0) {
        const std::size_t dst = pick_buffer(), src = pick_buffer();
        parts.push_back(copy_part(dst, src, r));
        model_copy(dst, src, r);
      } else {
        const std::size_t dst = pick_buffer_on(dev), src = pick_buffer();
        const auto k = static_cast<std::uint32_t>(rng_());
        parts.push_back(mix_part(dev, dst, src, r, k));
        model_mix(dst, src, r, k);
      }
    }
    rig::submit(d_.all[dev], parts);
    ++submissions_;
  }

  void host_access() {
    const std::size_t b = pick_buffer_on(d_.all.size() - 1);
    const auto bytes = buffers_[b].access();
    auto* words = reinterpret_cast<std::uint32_t*>(bytes.data());
    REQUIRE(std::equal(model_[b].begin(), model_[b].end(), words));
    const std::size_t i = pick(0, words_per_buffer - 1);
    words[i] = model_[b][i] = static_cast<std::uint32_t>(rng_());
  }

  Devices& d_;
  std::mt19937_64 rng_;
  std::vector<rig::Buffer> buffers_;
  std::vector<std::size_t> device_of_;
  std::vector<std::vector<std::uint32_t>> model_;
  std::uint64_t submissions_ = 0;
};

}  // namespace

TEST_CASE("randomized: 12,000 submissions on three SIM devices and the host match the model") {
  const std::uint64_t seed = seed_from_env();
  std::printf("randomized ordering test: seed %llu (rerun with RIG_TEST_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  INFO("seed " << seed);
  Devices devices;
  Walk walk(devices, seed);
  while (walk.submissions() < 12'000) walk.step();
  walk.check_all();
}

TEST_CASE("randomized: four threads submitting at once each match their own model") {
  const std::uint64_t seed = seed_from_env();
  std::printf("randomized threads test: seed %llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  INFO("seed " << seed);
  Devices devices;
  std::vector<std::unique_ptr<Walk>> walks;
  for (std::uint64_t t = 0; t < 4; ++t) walks.push_back(std::make_unique<Walk>(devices, seed + t));
  std::vector<std::thread> threads;
  for (auto& w : walks) {
    threads.emplace_back([&w] {
      while (w->submissions() < 2'500) w->step();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& w : walks) w->check_all();
}
