// A real packed program (tiny.rig: saxpy.c for the baseline level, built by `rig pack`), damaged
// at every byte and cut at every length: the reader refuses each with the reason that applies and
// never reads outside the bytes it was given (the ASan build runs this too).
#include <doctest/doctest.h>

#include <cstdio>

#include "program/format.hpp"
#include "rig/program.hpp"
#include "support.hpp"

namespace {

using namespace rig;
using rig::test::get_u32;
using rig::test::get_u64;
using rig::test::parse_error;
using rig::test::reseal;

std::vector<std::byte> tiny() {
  return rig::test::read_bytes(rig::test::env_path("RIG_TEST_TINY_RIG"));
}

std::string hex(unsigned v) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", v);
  return s;
}

// What the reader must say about `b`, a good file with one byte at `at` changed and its checksum
// left as it was. The header is checked field by field in file order,
// then the checksum, which covers everything else.
std::string expected_unsealed(const std::vector<std::byte>& b, std::size_t at) {
  const std::size_t n = b.size();
  if (at < 8) return "rig.program: not a rig.program file (bad magic)";
  const std::uint32_t version = get_u32(b, 8);
  if (version != 1) {
    return "rig.program: format version " + std::to_string(version) + ", this reader knows only 1";
  }
  const std::uint32_t count = get_u32(b, 12);
  if (count == 0) return "rig.program: no targets";
  if (count > 64) {
    return "rig.program: " + std::to_string(count) + " targets, more than the 64 allowed";
  }
  const std::uint64_t declared = get_u64(b, 16);
  if (declared > n) {
    return "rig.program: truncated: header says " + std::to_string(declared) + " bytes, file has " +
           std::to_string(n);
  }
  if (declared < n) {
    return "rig.program: trailing bytes: header says " + std::to_string(declared) +
           " bytes, file has " + std::to_string(n);
  }
  return "rig.program: checksum mismatch: the file is damaged";
}

TEST_CASE("tiny.rig is a real packed program with one target") {
  const auto good = tiny();
  auto p = Program::parse(good);
  REQUIRE(p.ok());
  REQUIRE(p->targets().size() == 1);
  CHECK(p->targets()[0].format == TargetFormat::host_elf);
  CHECK(p->targets()[0].arch == rig::test::env_path("RIG_TEST_BASELINE_LEVEL"));
  // Small enough that damaging every byte stays fast under ASan.
  CHECK(good.size() < 16 * 1024);
  MESSAGE("tiny.rig: " << good.size() << " bytes");
}

TEST_CASE("every byte of a packed program, changed, is refused with the reason that applies") {
  const auto good = tiny();
  const std::size_t n = good.size();
  for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
    CAPTURE(mask);
    std::size_t refused = 0;
    for (std::size_t at = 0; at < n; ++at) {
      auto b = good;
      b[at] ^= static_cast<std::byte>(mask);
      const std::string expected = expected_unsealed(b, at);
      const std::string got = parse_error(b);
      if (got != expected) {
        FAIL_CHECK("byte " << at << " ^ " << hex(mask) << ": got \"" << got << "\", expected \""
                           << expected << "\"");
      }
      refused += got != "ok";
    }
    CHECK(refused == n);
  }
}

TEST_CASE("a packed program cut short at every length, or with a byte more, is refused") {
  const auto good = tiny();
  const std::size_t n = good.size();
  for (std::size_t len = 0; len < n; ++len) {
    const std::string expected = len < 56
                                     ? "rig.program: truncated: " + std::to_string(len) +
                                           " bytes, less than the 56-byte header"
                                     : "rig.program: truncated: header says " + std::to_string(n) +
                                           " bytes, file has " + std::to_string(len);
    const std::string got = parse_error(std::vector<std::byte>(good.begin(), good.begin() + len));
    if (got != expected) FAIL_CHECK("length " << len << ": got \"" << got << "\"");
  }
  auto longer = good;
  longer.push_back(std::byte{0});
  CHECK(parse_error(longer) == "rig.program: trailing bytes: header says " + std::to_string(n) +
                                   " bytes, file has " + std::to_string(n + 1));
}

TEST_CASE("every byte of the header and table, changed under a fresh checksum, is refused") {
  // With the checksum made right again, a change reaches the record checks: this is what a file
  // crafted on purpose looks like, rather than a damaged one.
  const auto good = tiny();
  const std::size_t n = good.size();
  const std::string arch = rig::test::env_path("RIG_TEST_BASELINE_LEVEL");
  const std::uint64_t offset = get_u64(good, 56 + 32);
  const std::uint64_t size = get_u64(good, 56 + 40);
  REQUIRE(offset == 104);
  REQUIRE(offset + size == n);
  const std::string where = "rig.program: target 0: ";

  for (std::size_t at = 0; at < 104; ++at) {
    auto b = good;
    b[at] ^= std::byte{0xff};
    reseal(b);
    std::string expected;
    if (at < 24) {
      expected = expected_unsealed(b, at);
    } else if (at < 56) {
      expected = "ok";  // the checksum field itself: resealing puts it right again
    } else if (at < 60) {
      expected = where + "unknown format " + std::to_string(get_u32(b, 56));
    } else if (at < 64) {
      expected = where + "flags are " + std::to_string(get_u32(b, 60)) + ", this reader knows none";
    } else if (at < 88) {
      const std::size_t k = at - 64;
      if (k <= arch.size()) {
        // A name character, or the NUL that ends the name, becomes a byte >= 0x80.
        expected = where + "arch name has byte " + hex(std::to_integer<unsigned>(b[at])) +
                   " at position " + std::to_string(k) +
                   ", outside the name characters a-z A-Z 0-9 _ - .";
      } else {
        expected = where + "arch name padding is not all zero";
      }
    } else if (at < 96) {
      const std::uint64_t o = get_u64(b, 88);
      expected = o < 104 ? where + "payload at byte " + std::to_string(o) +
                               " overlaps the table or an earlier payload (next free byte 104)"
                         : where + "payload of " + std::to_string(size) + " bytes at byte " +
                               std::to_string(o) + " runs past the end of the file (" +
                               std::to_string(n) + " bytes)";
    } else {
      const std::uint64_t s = get_u64(b, 96);
      if (s > n - offset) {
        expected = where + "payload of " + std::to_string(s) + " bytes at byte 104 runs past the " +
                   "end of the file (" + std::to_string(n) + " bytes)";
      } else if (s == 0) {
        expected = where + "empty payload";
      } else {
        expected =
            "rig.program: trailing bytes: " + std::to_string(size - s) + " after the last payload";
      }
    }
    const std::string got = parse_error(b);
    if (got != expected) {
      FAIL_CHECK("byte " << at << ": got \"" << got << "\", expected \"" << expected << "\"");
    }
  }
}

TEST_CASE("a payload changed under a fresh checksum parses: the checksum is not a signature") {
  // What the container promises is integrity against damage, not authenticity: whoever can
  // write the file can write a valid one (docs/program.md says so). Each change shows in the
  // payload the reader hands out.
  const auto good = tiny();
  for (std::size_t at = 104; at < good.size(); at += 97) {
    auto b = good;
    b[at] ^= std::byte{0xff};
    reseal(b);
    auto p = Program::parse(b);
    REQUIRE(p.ok());
    CHECK(p->targets()[0].payload[at - 104] == (good[at] ^ std::byte{0xff}));
  }
}

}  // namespace
