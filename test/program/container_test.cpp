// The rig.program container: the writer's exact layout, round trips, and every rule the reader
// enforces, each with its exact error text.
#include <doctest/doctest.h>
#include <sodium.h>

#include <cstring>
#include <stdexcept>

#include "program/format.hpp"
#include "rig/program.hpp"
#include "support.hpp"

namespace {

using namespace rig;
using rig::test::get_u32;
using rig::test::get_u64;
using rig::test::parse_error;
using rig::test::put_u32;
using rig::test::put_u64;
using rig::test::reseal;

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return b;
}

std::vector<TargetSpec> three_targets() {
  return {
      {TargetFormat::host_elf, "x86_64-v3", pattern(1000, 1)},
      {TargetFormat::cuda_cubin, "sm_90", pattern(7, 2)},
      {TargetFormat::cuda_ptx, "sm_80", pattern(1, 3)},
  };
}

// A valid two-target file the rejection tests edit: host_elf x86_64 (100 bytes) at 152, then
// host_elf x86_64-v2 (50 bytes) at 252; 302 bytes in all.
std::vector<std::byte> two_targets() {
  const std::vector<TargetSpec> t = {
      {TargetFormat::host_elf, "x86_64", pattern(100, 4)},
      {TargetFormat::host_elf, "x86_64-v2", pattern(50, 5)},
  };
  return write_program(t);
}

constexpr std::size_t rec0 = 56, rec1 = 56 + 48;

std::string invalid_argument_text(const std::vector<TargetSpec>& t) {
  try {
    (void)write_program(t);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST_CASE("write_program lays out every byte as docs/program.md says") {
  const auto specs = three_targets();
  const std::vector<std::byte> f = write_program(specs);
  const std::size_t table_end = 56 + 3 * 48;
  REQUIRE(f.size() == table_end + 1000 + 7 + 1);

  CHECK(std::memcmp(f.data(), "RIGPROG\0", 8) == 0);
  CHECK(get_u32(f, 8) == 1);
  CHECK(get_u32(f, 12) == 3);
  CHECK(get_u64(f, 16) == f.size());

  // The checksum, computed here independently of the reader: BLAKE2b-256, unkeyed, over the file
  // with the checksum field left out.
  REQUIRE(sodium_init() >= 0);
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 32);
  const auto* p = reinterpret_cast<const unsigned char*>(f.data());
  crypto_generichash_update(&st, p, 24);
  crypto_generichash_update(&st, p + 56, f.size() - 56);
  unsigned char sum[32];
  crypto_generichash_final(&st, sum, 32);
  CHECK(std::memcmp(sum, p + 24, 32) == 0);

  std::size_t offset = table_end;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    const std::size_t r = 56 + i * 48;
    CHECK(get_u32(f, r) == static_cast<std::uint32_t>(specs[i].format));
    CHECK(get_u32(f, r + 4) == 0);
    char arch[24];
    std::memcpy(arch, f.data() + r + 8, 24);
    CHECK(std::string(arch) == specs[i].arch);
    for (std::size_t k = specs[i].arch.size(); k < 24; ++k) CHECK(arch[k] == '\0');
    CHECK(get_u64(f, r + 32) == offset);
    CHECK(get_u64(f, r + 40) == specs[i].payload.size());
    CHECK(std::memcmp(f.data() + offset, specs[i].payload.data(), specs[i].payload.size()) == 0);
    offset += specs[i].payload.size();
  }
}

TEST_CASE("a written program parses back to the same targets and payloads") {
  const auto specs = three_targets();
  const std::vector<std::byte> f = write_program(specs);
  auto program = Program::parse(f);
  REQUIRE(program.ok());
  REQUIRE(program->targets().size() == specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    const Target& t = program->targets()[i];
    CHECK(t.format == specs[i].format);
    CHECK(t.arch == specs[i].arch);
    REQUIRE(t.payload.size() == specs[i].payload.size());
    CHECK(std::memcmp(t.payload.data(), specs[i].payload.data(), t.payload.size()) == 0);
    // The payload is a view into the program's own bytes.
    CHECK(t.payload.data() >= program->bytes().data());
    CHECK(t.payload.data() + t.payload.size() <= program->bytes().data() + f.size());
  }
  CHECK(program->bytes().size() == f.size());
  CHECK(std::memcmp(program->bytes().data(), f.data(), f.size()) == 0);

  // A copy shares the bytes, and outlives the original.
  Program copy = *program;
  program = Program::parse(f);
  CHECK(copy.targets()[0].payload.data() == copy.bytes().data() + 56 + 3 * 48);
  CHECK(std::to_integer<int>(copy.targets()[2].payload[0]) == 3);
}

TEST_CASE("Program::read reads a file and names it in every error") {
  rig::test::ScratchDir dir;
  const std::string path = dir / "p.rig";
  rig::test::write_bytes(path, write_program(three_targets()));
  auto p = Program::read(path);
  REQUIRE(p.ok());
  CHECK(p->targets().size() == 3);

  CHECK(Program::read(dir / "missing.rig").error() ==
        dir / "missing.rig" + ": cannot open: No such file or directory");
  CHECK(Program::read(dir.path()).error() == dir.path() + ": not a regular file");

  auto damaged = write_program(three_targets());
  damaged.back() ^= std::byte{1};
  rig::test::write_bytes(path, damaged);
  CHECK(Program::read(path).error() ==
        path + ": rig.program: checksum mismatch: the file is damaged");
}

TEST_CASE("the reader refuses a bad header, each with its own reason") {
  const auto good = two_targets();
  REQUIRE(good.size() == 302);
  REQUIRE(parse_error(good) == "ok");

  SUBCASE("shorter than the header") {
    for (std::size_t n : {0, 1, 55}) {
      CHECK(parse_error(std::vector<std::byte>(good.begin(), good.begin() + n)) ==
            "rig.program: truncated: " + std::to_string(n) +
                " bytes, less than the 56-byte header");
    }
  }
  SUBCASE("bad magic") {
    auto b = good;
    b[7] = std::byte{'!'};
    CHECK(parse_error(b) == "rig.program: not a rig.program file (bad magic)");
  }
  SUBCASE("another version") {
    auto b = good;
    put_u32(b, 8, 2);
    reseal(b);
    CHECK(parse_error(b) == "rig.program: format version 2, this reader knows only 1");
  }
  SUBCASE("no targets") {
    auto b = good;
    put_u32(b, 12, 0);
    reseal(b);
    CHECK(parse_error(b) == "rig.program: no targets");
  }
  SUBCASE("too many targets") {
    auto b = good;
    put_u32(b, 12, 65);
    reseal(b);
    CHECK(parse_error(b) == "rig.program: 65 targets, more than the 64 allowed");
  }
  SUBCASE("the header's size is larger than the file: truncated") {
    auto b = good;
    b.resize(301);
    CHECK(parse_error(b) == "rig.program: truncated: header says 302 bytes, file has 301");
  }
  SUBCASE("the header's size is smaller than the file: trailing bytes") {
    auto b = good;
    b.push_back(std::byte{0});
    CHECK(parse_error(b) == "rig.program: trailing bytes: header says 302 bytes, file has 303");
  }
  SUBCASE("the table runs past the end of the file") {
    // 64 records need 3128 bytes; the file says, truthfully, that it has 302.
    auto b = good;
    put_u32(b, 12, 64);
    reseal(b);
    CHECK(parse_error(b) ==
          "rig.program: the table of 64 targets ends at byte 3128, past the end of the file (302 "
          "bytes)");
  }
  SUBCASE("checksum") {
    for (std::size_t at :
         {std::size_t{24}, std::size_t{55}, rec0, rec1 + 47, std::size_t{152}, std::size_t{301}}) {
      CAPTURE(at);
      auto b = good;
      b[at] ^= std::byte{0x10};
      CHECK(parse_error(b) == "rig.program: checksum mismatch: the file is damaged");
    }
  }
}

TEST_CASE("the reader refuses a bad target record, each with its own reason") {
  const auto good = two_targets();
  auto edit = [&](auto&& change) {
    auto b = good;
    change(b);
    reseal(b);
    return parse_error(b);
  };

  SUBCASE("unknown format") {
    CHECK(edit([](auto& b) { put_u32(b, rec1, 0); }) == "rig.program: target 1: unknown format 0");
    CHECK(edit([](auto& b) { put_u32(b, rec0, 4); }) == "rig.program: target 0: unknown format 4");
  }
  SUBCASE("flags") {
    CHECK(edit([](auto& b) { put_u32(b, rec0 + 4, 0x100); }) ==
          "rig.program: target 0: flags are 256, this reader knows none");
  }
  SUBCASE("arch without a NUL") {
    CHECK(edit([](auto& b) {
            for (std::size_t k = 0; k < 24; ++k) b[rec1 + 8 + k] = std::byte{'a'};
          }) == "rig.program: target 1: arch name is not NUL-terminated within its 24 bytes");
  }
  SUBCASE("empty arch") {
    CHECK(edit([](auto& b) {
            for (std::size_t k = 0; k < 24; ++k) b[rec0 + 8 + k] = std::byte{0};
          }) == "rig.program: target 0: empty arch name");
  }
  SUBCASE("a byte that is not a name character") {
    CHECK(edit([](auto& b) { b[rec0 + 8 + 3] = std::byte{'/'}; }) ==
          "rig.program: target 0: arch name has byte 0x2f at position 3, outside the name "
          "characters a-z A-Z 0-9 _ - .");
    CHECK(edit([](auto& b) { b[rec1 + 8] = std::byte{0xc3}; }) ==
          "rig.program: target 1: arch name has byte 0xc3 at position 0, outside the name "
          "characters a-z A-Z 0-9 _ - .");
  }
  SUBCASE("padding after the NUL") {
    CHECK(edit([](auto& b) { b[rec0 + 8 + 23] = std::byte{'x'}; }) ==
          "rig.program: target 0: arch name padding is not all zero");
    // "x86_64\0v" is a name and a non-zero byte after its NUL, not the name "x86_64v".
    CHECK(edit([](auto& b) { b[rec0 + 8 + 7] = std::byte{'v'}; }) ==
          "rig.program: target 0: arch name padding is not all zero");
  }
  SUBCASE("a payload over the table") {
    CHECK(edit([](auto& b) { put_u64(b, rec0 + 32, 151); }) ==
          "rig.program: target 0: payload at byte 151 overlaps the table or an earlier payload "
          "(next free byte 152)");
  }
  SUBCASE("overlapping payloads") {
    CHECK(edit([](auto& b) { put_u64(b, rec1 + 32, 251); }) ==
          "rig.program: target 1: payload at byte 251 overlaps the table or an earlier payload "
          "(next free byte 252)");
    CHECK(edit([](auto& b) { put_u64(b, rec1 + 32, 152); }) ==
          "rig.program: target 1: payload at byte 152 overlaps the table or an earlier payload "
          "(next free byte 252)");
  }
  SUBCASE("a payload past the end") {
    CHECK(edit([](auto& b) { put_u64(b, rec1 + 40, 51); }) ==
          "rig.program: target 1: payload of 51 bytes at byte 252 runs past the end of the file "
          "(302 bytes)");
    CHECK(edit([](auto& b) { put_u64(b, rec1 + 32, 303); }) ==
          "rig.program: target 1: payload of 50 bytes at byte 303 runs past the end of the file "
          "(302 bytes)");
    // offset + bytes overflows 64 bits: still past the end, not a wrap-around into the file.
    CHECK(edit([](auto& b) { put_u64(b, rec1 + 40, ~std::uint64_t{0} - 200); }) ==
          "rig.program: target 1: payload of 18446744073709551415 bytes at byte 252 runs past the "
          "end of the file (302 bytes)");
  }
  SUBCASE("an empty payload") {
    CHECK(edit([](auto& b) { put_u64(b, rec0 + 40, 0); }) ==
          "rig.program: target 0: empty payload");
  }
  SUBCASE("two targets of one format and arch") {
    CHECK(edit([](auto& b) {
            b[rec1 + 8 + 6] = std::byte{0};
            b[rec1 + 8 + 7] = std::byte{0};
            b[rec1 + 8 + 8] = std::byte{0};
          }) == "rig.program: target 1: a second host_elf target for x86_64");
    // The same arch in another format is another target.
    CHECK(edit([](auto& b) {
            put_u32(b, rec1, 3);
            b[rec1 + 8 + 6] = std::byte{0};
            b[rec1 + 8 + 7] = std::byte{0};
            b[rec1 + 8 + 8] = std::byte{0};
          }) == "ok");
  }
  SUBCASE("bytes after the last payload") {
    auto b = good;
    b.resize(307, std::byte{0});
    put_u64(b, 16, 307);
    reseal(b);
    CHECK(parse_error(b) == "rig.program: trailing bytes: 5 after the last payload");
  }
  SUBCASE("a gap between payloads is allowed") {
    // Payloads follow the table in record order; a writer may leave space between them (to align
    // them, say), as long as the last one ends the file.
    auto b = good;
    b.insert(b.begin() + 252, 12, std::byte{0xee});
    put_u64(b, 16, 314);
    put_u64(b, rec1 + 32, 264);
    reseal(b);
    auto p = Program::parse(b);
    REQUIRE(p.ok());
    CHECK(p->targets()[1].payload.data() == p->bytes().data() + 264);
    CHECK(p->targets()[1].payload.size() == 50);
  }
}

TEST_CASE("write_program refuses what the format cannot hold") {
  using V = std::vector<TargetSpec>;
  CHECK(invalid_argument_text({}) == "rig.program: a program needs a target");
  V many;
  for (int i = 0; i < 65; ++i) {
    many.push_back({TargetFormat::cuda_cubin, "sm_" + std::to_string(i), pattern(1, 0)});
  }
  CHECK(invalid_argument_text(many) == "rig.program: 65 targets, more than the 64 allowed");
  many.pop_back();
  CHECK(Program::parse(write_program(many)).ok());
  CHECK(invalid_argument_text(V{{static_cast<TargetFormat>(9), "x", pattern(1, 0)}}) ==
        "rig.program: unknown target format 9");
  CHECK(invalid_argument_text(V{{TargetFormat::host_elf, "", pattern(1, 0)}}) ==
        "rig.program: arch name '' must have 1 to 23 characters");
  CHECK(invalid_argument_text(V{{TargetFormat::host_elf, std::string(24, 'a'), pattern(1, 0)}}) ==
        "rig.program: arch name 'aaaaaaaaaaaaaaaaaaaaaaaa' must have 1 to 23 characters");
  CHECK(Program::parse(
            write_program(V{{TargetFormat::host_elf, std::string(23, 'a'), pattern(1, 0)}}))
            .ok());
  CHECK(invalid_argument_text(V{{TargetFormat::host_elf, "x86 64", pattern(1, 0)}}) ==
        "rig.program: arch name 'x86 64' has a character outside a-z A-Z 0-9 _ - .");
  CHECK(invalid_argument_text(V{{TargetFormat::host_elf, "x86_64", {}}}) ==
        "rig.program: empty payload for host_elf x86_64");
  CHECK(invalid_argument_text(V{{TargetFormat::cuda_ptx, "sm_80", pattern(1, 0)},
                                {TargetFormat::cuda_ptx, "sm_80", pattern(2, 0)}}) ==
        "rig.program: two cuda_ptx targets for sm_80");
}

TEST_CASE("format names") {
  CHECK(format_name(TargetFormat::host_elf) == "host_elf");
  CHECK(format_name(TargetFormat::cuda_cubin) == "cuda_cubin");
  CHECK(format_name(TargetFormat::cuda_ptx) == "cuda_ptx");
  CHECK(format_name(static_cast<TargetFormat>(0)) == "unknown");
}

}  // namespace
