// Choosing host code for this processor, and what loading it checks.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/arch.hpp"
#include "program/host_module.hpp"
#include "rig/kernel.h"
#include "rig/program.hpp"
#include "support.hpp"

namespace {

using namespace rig;

// Every host level of this machine's architecture, lowest first; the processor runs some of them.
std::vector<std::string> arch_levels() {
#if defined(__x86_64__)
  return {"x86_64", "x86_64-v2", "x86_64-v3", "x86_64-v4"};
#else
  return {"aarch64"};
#endif
}

// A level of the other architecture, which this processor never runs.
std::string foreign_level() {
#if defined(__x86_64__)
  return "aarch64";
#else
  return "x86_64";
#endif
}

bool runs(const std::string& level) {
  const auto& l = detail::host_isa_levels();
  return std::find(l.begin(), l.end(), level) != l.end();
}

std::string runs_text() {
  std::string s;
  for (const auto& l : detail::host_isa_levels()) s += (s.empty() ? "" : ", ") + l;
  return s;
}

// A program of `specs` whose payloads are their own arch names, so a choice is easy to read.
Program program_of(const std::vector<std::pair<TargetFormat, std::string>>& specs) {
  std::vector<TargetSpec> t;
  for (const auto& [format, arch] : specs) t.push_back({format, arch, rig::test::bytes_of(arch)});
  auto p = Program::parse(write_program(t));
  REQUIRE(p.ok());
  return *p;
}

std::string chosen(const Program& p) {
  auto t = program::choose_host_target(p);
  return t ? (*t)->arch : t.error();
}

TEST_CASE("the host's levels are this architecture's, best first") {
  const auto& l = detail::host_isa_levels();
  REQUIRE(!l.empty());
  CHECK(detail::host_isa_level() == l.front());
  // Every level below one the processor runs is run too: the levels nest.
  const auto all = arch_levels();
  std::vector<std::string> expected;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (runs(*it)) expected.push_back(*it);
  }
  CHECK(l == expected);
  CHECK(l.back() == all.front());
  MESSAGE("this processor runs " << runs_text());
}

TEST_CASE("choose_host_target picks the highest level the processor runs") {
  std::vector<std::pair<TargetFormat, std::string>> every;
  for (const auto& level : arch_levels()) every.push_back({TargetFormat::host_elf, level});
  CHECK(chosen(program_of(every)) == detail::host_isa_level());

  // Record order does not matter, nor do other formats' targets for the same names.
  auto reversed = every;
  std::reverse(reversed.begin(), reversed.end());
  reversed.insert(reversed.begin(), {TargetFormat::cuda_ptx, detail::host_isa_level()});
  reversed.push_back({TargetFormat::host_elf, foreign_level()});
  CHECK(chosen(program_of(reversed)) == detail::host_isa_level());

  // The choice from a target's payload, not just its name.
  const Program p = program_of(every);
  auto t = program::choose_host_target(p);
  REQUIRE(t.ok());
  CHECK(rig::test::text_of({(*t)->payload.begin(), (*t)->payload.end()}) ==
        detail::host_isa_level());
}

TEST_CASE("a program with only some levels gets the best of those the processor runs") {
  const auto all = arch_levels();
  for (const auto& level : all) {
    CAPTURE(level);
    const Program p = program_of({{TargetFormat::host_elf, level}});
    if (runs(level)) {
      CHECK(chosen(p) == level);
    } else {
      CHECK(chosen(p) == "rig.program: no host code for this processor (it runs " + runs_text() +
                             "; the program has " + level + ")");
    }
  }
  // The baseline and the top level: the top if it runs, else the baseline.
  const Program p =
      program_of({{TargetFormat::host_elf, all.front()}, {TargetFormat::host_elf, all.back()}});
  CHECK(chosen(p) == (runs(all.back()) ? all.back() : all.front()));
}

TEST_CASE("no host code for this processor is an error that says what each side has") {
  CHECK(chosen(program_of({{TargetFormat::host_elf, foreign_level()}})) ==
        "rig.program: no host code for this processor (it runs " + runs_text() +
            "; the program has " + foreign_level() + ")");
  CHECK(chosen(program_of(
            {{TargetFormat::host_elf, foreign_level()}, {TargetFormat::host_elf, "riscv64"}})) ==
        "rig.program: no host code for this processor (it runs " + runs_text() +
            "; the program has " + foreign_level() + ", riscv64)");
  CHECK(chosen(
            program_of({{TargetFormat::cuda_cubin, "sm_90"}, {TargetFormat::cuda_ptx, "sm_80"}})) ==
        "rig.program: no host code for this processor (it runs " + runs_text() +
            "; the program has no host code)");
}

// A program holding the shared object at `path` as host code for the baseline level, which
// every processor of this architecture runs.
Program wrap(const std::string& path) {
  const std::vector<TargetSpec> t = {
      {TargetFormat::host_elf, arch_levels().front(), rig::test::read_bytes(path)}};
  auto p = Program::parse(write_program(t));
  REQUIRE(p.ok());
  return *p;
}

std::string load_error(const Program& p) {
  auto m = program::load_host(p);
  return m ? std::string("ok") : m.error();
}

TEST_CASE("loading checks the kernel ABI the host code was built for") {
  const std::string level = arch_levels().front();
  CHECK(load_error(wrap(rig::test::env_path("RIG_TEST_ABI_NONE"))) ==
        "rig.program: the " + level + " host code does not export rig_kernel_abi (was it built " +
            "with rig pack?)");
  CHECK(load_error(wrap(rig::test::env_path("RIG_TEST_ABI_WRONG"))) ==
        "rig.program: the " + level + " host code was built for kernel ABI 999, this rig speaks " +
            std::to_string(RIG_KERNEL_ABI));
}

TEST_CASE("host code that is not a shared object fails to load with the loader's reason") {
  const std::vector<TargetSpec> t = {
      {TargetFormat::host_elf, arch_levels().front(), rig::test::bytes_of("not an ELF object")}};
  auto p = Program::parse(write_program(t));
  REQUIRE(p.ok());
  const std::string e = load_error(*p);
  const std::string prefix =
      "rig.program: loading the " + arch_levels().front() + " host code failed: ";
  CHECK(e.substr(0, prefix.size()) == prefix);
  CHECK(e.size() > prefix.size());
  MESSAGE(e);
}

TEST_CASE("a loaded module finds only the functions the object defines") {
  auto p = Program::read(rig::test::env_path("RIG_TEST_SAXPY_RIG"));
  REQUIRE(p.ok());
  auto m = program::load_host(*p);
  REQUIRE(m.ok());
  for (const char* entry : {"saxpy", "fill_u32", "add_u32", "describe_launch"}) {
    CAPTURE(entry);
    CHECK((*m)->find(entry) != nullptr);
    CHECK((*m)->find(entry) == (*m)->find(entry));  // the second time from the cache
  }
  // Hidden functions, data, the ABI word, and what the object's libraries define are not entries.
  for (const char* name :
       {"hidden_helper", "exported_table", "rig_kernel_abi", "memcpy", "abort", "", "nope"}) {
    CAPTURE(name);
    CHECK((*m)->find(name) == nullptr);
  }
}

}  // namespace
