// What the CUDA tests share: the hand-written test kernels as a rig.program, and byte patterns.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "rig/program.hpp"
#include "support/pattern.hpp"

namespace rig::test {

inline std::vector<std::byte> file_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.empty()) throw std::runtime_error(std::string("cannot read ") + path);
  std::vector<std::byte> out(data.size());
  std::memcpy(out.data(), data.data(), data.size());
  return out;
}

inline std::vector<std::byte> text_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

inline Program program_of(std::vector<TargetSpec> targets) {
  auto p = Program::parse(write_program(targets));
  if (!p) throw std::runtime_error(p.error());
  return *p;
}

// test/backends/cuda/kernels.ptx (fill_u32, spin_ns, trap) as a PTX-only program for sm_70 and up.
inline Program ptx_kernels() {
  const char* path = std::getenv("RIG_TEST_CUDA_PTX");
  if (path == nullptr) throw std::runtime_error("RIG_TEST_CUDA_PTX is not set");
  return program_of({TargetSpec{TargetFormat::cuda_ptx, "sm_70", file_bytes(path)}});
}

}  // namespace rig::test
