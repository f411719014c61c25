// rig.program: one file holding a program for several targets (host code per instruction-set
// level; CUDA code later), and loading it on a device. The format is docs/program.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rig/result.hpp"
#include "rig/rig.hpp"

namespace rig {

// What a target's payload is. Values are the format's own numbers; never reuse one.
enum class TargetFormat : std::uint32_t {
  host_elf = 1,    // a shared object for one host instruction-set level, such as "x86_64-v3"
  cuda_cubin = 2,  // a cubin for one SM architecture, such as "sm_90"
  cuda_ptx = 3,    // PTX for JIT compilation, arch the lowest SM it targets
};

// The format's name as `rig pack --list` and error messages print it ("host_elf"), or "unknown".
std::string_view format_name(TargetFormat format) noexcept;

// One target of a parsed program. The payload points into the Program's bytes, so it is valid as
// long as any copy of that Program is.
struct Target {
  TargetFormat format;
  std::string arch;
  std::span<const std::byte> payload;
};

// A parsed rig.program. Owner: whoever holds a copy; copies share one immutable state, so a copy is
// cheap and any thread may read it. Lifetime: the bytes live as long as the last copy.
class Program {
 public:
  // Checks every field and the checksum; Error names what is wrong and where.
  static Result<Program> parse(std::vector<std::byte> bytes);
  // Reads and parses `path`; Error names the file. Files larger than 4 GiB are refused unread.
  static Result<Program> read(const std::string& path);

  const std::vector<Target>& targets() const;
  std::span<const std::byte> bytes() const;

 private:
  struct State;
  explicit Program(std::shared_ptr<const State> s) : s_(std::move(s)) {}
  std::shared_ptr<const State> s_;
};

// A target to write: its payload is copied into the file.
struct TargetSpec {
  TargetFormat format;
  std::string arch;
  std::vector<std::byte> payload;
};

// The bytes of a rig.program holding `targets`; invalid_argument for an arch name that the format
// cannot hold or two targets of one format and arch.
std::vector<std::byte> write_program(std::span<const TargetSpec> targets);

// Loads `program` on `d`, choosing the best target for d's arch: for host code, the highest
// instruction-set level this machine's processor runs. Error if no target fits or loading fails.
Result<Image> load(const Device& d, const Program& program);

}  // namespace rig
