// Rails through real rigd agents on loopback: between two agents, from and to the controller's
// host, the counts, ordering by memory with other work, validation, and failure.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"

using rig::test::Rigd;

namespace {

rig::remote::Job start(const std::string& key_file, const std::vector<Rigd*>& agents) {
  std::vector<rig::remote::Address> addresses;
  for (Rigd* a : agents) addresses.push_back(a->address());
  auto job = rig::remote::connect(rig::test::load_key(key_file), addresses);
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  return *job;
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<std::uint8_t>(x);
  }
  return v;
}

// `bytes` on `host` (a job's host or this process's), holding `v`.
rig::Buffer holding(const rig::Device& host, const std::vector<std::uint8_t>& v) {
  rig::Buffer b = rig::Buffer::make(host, v.size());
  if (host == rig::host()) {
    std::memcpy(b.access().data(), v.data(), v.size());
    return b;
  }
  rig::Buffer local = rig::Buffer::make(rig::host(), v.size());
  std::memcpy(local.access().data(), v.data(), v.size());
  rig::copy(b, local).wait();
  return b;
}

std::vector<std::uint8_t> contents(const rig::Buffer& b) {
  std::vector<std::uint8_t> out(b.size());
  if (b.device() == rig::host()) {
    std::memcpy(out.data(), b.access().data(), out.size());
    return out;
  }
  rig::Buffer local = rig::Buffer::make(rig::host(), b.size());
  rig::copy(local, b).wait();
  std::memcpy(out.data(), local.access().data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("a rail carries its transfers between two agents, round after round") {
  const auto key = rig::test::make_key_file("rail-agents");
  Rigd a(key), b(key);
  auto job = start(key, {&a, &b});
  const rig::Device& ha = job.hosts()[0];
  const rig::Device& hb = job.hosts()[1];
  const std::size_t n = (3u << 20) + 17;  // chunks of 1 MiB and a tail
  rig::Buffer src = holding(ha, pattern(n, 1));
  rig::Buffer dst = holding(hb, std::vector<std::uint8_t>(n + 100, 0));
  rig::remote::Transfer t{src, 0, dst, 100, n};
  auto rail = rig::remote::rail(std::span(&t, 1));
  REQUIRE_MESSAGE(rail.ok(), (rail.ok() ? "" : rail.error()));
  CHECK(rail->from() == ha);
  CHECK(rail->to() == hb);
  CHECK(rail->sent() == 0);
  CHECK(rail->arrived() == 0);
  for (std::uint32_t round = 1; round <= 3; ++round) {
    if (round > 1) {
      // The source written between rounds: the write follows the earlier round's read (by
      // memory, at the agent), and the round after it reads what it wrote.
      rig::Buffer next = holding(rig::host(), pattern(n, round));
      rig::copy(src, next);
    }
    CHECK(rail->go() == round);
    rail->wait_arrived(round);
    CHECK(rail->arrived() >= round);
    CHECK(rail->sent() >= round);
    const auto got = contents(dst);
    const auto want = pattern(n, round);
    CHECK(std::memcmp(got.data() + 100, want.data(), n) == 0);
    CHECK(got[99] == 0);
  }
  job.close();
}
