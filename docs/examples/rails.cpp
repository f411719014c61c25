// A controller of a job that `rig run` starts (docs/rails.md walks through it): it moves data from
// machine A's host memory to machine B's over rails, which carry the bytes on the connection
// between the two agents, never through this process.
//
// First the controller drives a rail: each round it writes A's buffer (a copy from this process),
// calls go() and copies B's buffer back to check it. Then host code on the two agents drives two
// rails itself (rails.rig): A streams blocks to B, B answers each with its sum, and no message of
// the controller's is needed per round.
//
//   rig run --local 2 -- rig-example-rails RAILS.rig
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::uint8_t byte_of(std::uint64_t round, std::size_t i) {
  return static_cast<std::uint8_t>(round * 31 + i * 7 + (i >> 12));
}

// Rounds driven by this process: returns the number of rounds whose bytes were wrong.
int controller_rounds(const rig::Device& a, const rig::Device& b) {
  constexpr std::size_t n = (8u << 20) + 5;  // 8 MiB and a few bytes: many 1 MiB chunks, and a tail
  constexpr std::uint64_t rounds = 4;
  const rig::Buffer src = rig::Buffer::make(a, n);  // A's host memory
  const rig::Buffer dst = rig::Buffer::make(b, n);  // B's
  // This process's memory, through which it writes the source and reads the destination.
  const rig::Buffer staging = rig::Buffer::make(rig::host(), n);
  const rig::Buffer back = rig::Buffer::make(rig::host(), n);

  const rig::remote::Transfer t{src, 0, dst, 0, n};
  auto rail = rig::remote::rail(std::span(&t, 1));  // one round trip to A and to B
  if (!rail) {
    std::fprintf(stderr, "rig-example-rails: %s\n", rail.error().c_str());
    return 1;
  }

  int wrong_rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t round = 1; round <= rounds; ++round) {
    // Host access waits for the copy of the round before, which read this buffer.
    std::span<std::byte> out = staging.access();
    for (std::size_t i = 0; i < n; ++i) out[i] = std::byte{byte_of(round, i)};
    // The copy writes the rail's source, so the round (which reads it) follows the copy; the round
    // before it, which read the source too, comes before the copy. Ordered by memory, at A.
    rig::copy(src, staging);
    const std::uint64_t r = rail->go();  // queued; returns at once
    if (r != round) {
      std::fprintf(stderr, "rig-example-rails: go() gave round %llu, not %llu\n",
                   static_cast<unsigned long long>(r), static_cast<unsigned long long>(round));
      return 1;
    }
    // The copy back reads what the round writes, so it follows the round (at B) with no wait
    // here: the even rounds rely on that alone, the odd ones wait for the count first.
    if (round % 2 == 1) rail->wait_arrived(r);
    rig::copy(back, dst).wait();
    const std::span<std::byte> in = back.access();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += in[i] != std::byte{byte_of(round, i)};
    wrong_rounds += wrong != 0;
  }
  std::printf(
      "%-24s %llu rounds of %zu bytes from %s, sent %llu, arrived %llu, %d wrong, %.1f ms\n",
      "controller-driven rail", static_cast<unsigned long long>(rounds), n,
      rail->from().name().c_str(), static_cast<unsigned long long>(rail->sent()),
      static_cast<unsigned long long>(rail->arrived()), wrong_rounds, ms_since(t0));
  return wrong_rounds;
}

// The same kind of stream, driven by host code on A and B (rails.c). Returns 0 if every round
// checked on both machines.
int host_code_rounds(const rig::Device& a, const rig::Device& b, const rig::Program& program) {
  constexpr std::uint64_t words = 8192;  // 64 KiB blocks
  constexpr std::uint64_t rounds = 500;
  const rig::Buffer block_a = rig::Buffer::make(a, words * 8),
                    block_b = rig::Buffer::make(b, words * 8);
  const rig::Buffer sum_a = rig::Buffer::make(a, 8), sum_b = rig::Buffer::make(b, 8);
  const rig::Buffer result_a = rig::Buffer::make(a, 16), result_b = rig::Buffer::make(b, 16);
  const rig::remote::Transfer blocks{block_a, 0, block_b, 0, words * 8};
  const rig::remote::Transfer sums{sum_b, 0, sum_a, 0, 8};
  auto data = rig::remote::rail(std::span(&blocks, 1));
  auto answers = rig::remote::rail(std::span(&sums, 1));
  for (const auto* r : {&data, &answers}) {
    if (!*r) {
      std::fprintf(stderr, "rig-example-rails: %s\n", r->error().c_str());
      return 1;
    }
  }
  auto image_a = rig::load(a, program);
  auto image_b = rig::load(b, program);
  for (const auto* image : {&image_a, &image_b}) {
    if (!*image) {
      std::fprintf(stderr, "rig-example-rails: %s\n", image->error().c_str());
      return 1;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Each run gets the rails' records (Arg::rail) and the buffers the rails read and write. From
  // here on the rails' rounds start in host code; the controller's go() would raise.
  const std::uint64_t va =
      rig::submit(a, rig::Run{*image_a,
                              "produce",
                              rig::Shape{},
                              {rig::Arg::rail(*data), rig::Arg::rail(*answers),
                               rig::Arg::inout(block_a), rig::Arg::in(sum_a), rig::Arg::word(words),
                               rig::Arg::word(rounds), rig::Arg::out(result_a)}});
  const std::uint64_t vb =
      rig::submit(b, rig::Run{*image_b,
                              "consume",
                              rig::Shape{},
                              {rig::Arg::rail(*data), rig::Arg::rail(*answers),
                               rig::Arg::in(block_b), rig::Arg::inout(sum_b), rig::Arg::word(words),
                               rig::Arg::word(rounds), rig::Arg::out(result_b)}});
  a.wait(va);
  b.wait(vb);
  const double ms = ms_since(t0);

  int failures = 0;
  for (const rig::Buffer* r : {&result_a, &result_b}) {
    const rig::Buffer here = rig::Buffer::make(rig::host(), 16);
    rig::copy(here, *r).wait();
    std::uint64_t got[2];
    std::memcpy(got, here.access().data(), sizeof got);
    const bool on_a = r == &result_a;
    std::printf("%-24s %s %llu rounds, %llu wrong %s\n", "host-code rails",
                r->device().name().c_str(), static_cast<unsigned long long>(got[0]),
                static_cast<unsigned long long>(got[1]), on_a ? "sums" : "words");
    failures += got[0] != rounds || got[1] != 0;
  }
  // This process learns of host code's rounds through the counts the agents send it.
  data->wait_arrived(rounds);
  answers->wait_arrived(rounds);
  std::printf("%-24s %.1f us per round trip (mean of %llu); counts here: %llu and %llu arrived\n",
              "host-code rails", ms * 1000 / rounds, static_cast<unsigned long long>(rounds),
              static_cast<unsigned long long>(data->arrived()),
              static_cast<unsigned long long>(answers->arrived()));
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rig run --local 2 -- %s RAILS.rig\n", argv[0]);
    return 2;
  }
  auto program = rig::Program::read(argv[1]);
  if (!program) {
    std::fprintf(stderr, "rig-example-rails: %s\n", program.error().c_str());
    return 1;
  }
  auto job = rig::remote::launched();
  if (!job) {
    std::fprintf(stderr, "rig-example-rails: run me through a launcher: rig run --local 2 -- %s\n",
                 "rig-example-rails RAILS.rig");
    return 2;
  }
  if (!*job) {
    std::fprintf(stderr, "rig-example-rails: the job did not start: %s\n", job->error().c_str());
    return 1;
  }
  if ((*job)->hosts().size() < 2) {
    std::fprintf(stderr, "rig-example-rails: a rail needs two machines: rig run --local 2\n");
    (*job)->close();
    return 2;
  }
  const rig::Device a = (*job)->hosts()[0];
  const rig::Device b = (*job)->hosts()[1];
  int failures = 0;
  try {
    failures += controller_rounds(a, b);
    failures += host_code_rounds(a, b, *program);
  } catch (const rig::Lost& e) {
    // The job failed: every rail's counts are raised, and its hosts are lost with the root cause.
    std::fprintf(stderr, "rig-example-rails: the job failed: %s\n", e.what());
    (*job)->close();
    return 1;
  }
  (*job)->close();
  if (failures != 0) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("every round checked between %s and %s; closed the job\n", a.name().c_str(),
              b.name().c_str());
  return 0;
}
