// The test kernels (support/kernels.c) as a rig.program, built from the shared object the build
// made; RIG_TEST_KERNELS names it.
#pragma once

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "rig/program.hpp"

namespace rig::test {

// The rig.program's bytes, as a controller played by hand LOADs them.
inline std::vector<std::byte> test_kernels_bytes() {
  const char* path = std::getenv("RIG_TEST_KERNELS");
  if (path == nullptr)
    throw std::runtime_error("RIG_TEST_KERNELS is not set (run through meson test)");
  std::ifstream in(path, std::ios::binary);
  std::vector<char> so((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (so.empty()) throw std::runtime_error(std::string("cannot read ") + path);
  TargetSpec t{TargetFormat::host_elf, detail::host_isa_level(), {}};
  t.payload.resize(so.size());
  std::memcpy(t.payload.data(), so.data(), so.size());
  return write_program(std::span<const TargetSpec>(&t, 1));
}

inline Program test_kernels() {
  auto program = Program::parse(test_kernels_bytes());
  if (!program) throw std::runtime_error(program.error());
  return *program;
}

}  // namespace rig::test
