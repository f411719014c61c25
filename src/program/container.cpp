// Reading and writing rig.program files. Every field of a file is checked before it is used;
// the checksum makes a damaged payload an error here rather than a crash in the loader.
#include <sodium.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "program/file.hpp"
#include "program/format.hpp"
#include "rig/program.hpp"

namespace rig {

// The file's bytes and the targets that view them: written once by parse, then only read, by any
// thread, through every copy of the Program.
struct Program::State {
  std::vector<std::byte> bytes;
  std::vector<Target> targets;
};

namespace {

std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

std::uint64_t get_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

void put_u64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

bool known_format(std::uint32_t f) {
  return f == static_cast<std::uint32_t>(TargetFormat::host_elf) ||
         f == static_cast<std::uint32_t>(TargetFormat::cuda_cubin) ||
         f == static_cast<std::uint32_t>(TargetFormat::cuda_ptx);
}

// Arch names are identifiers such as "x86_64-v3" or "sm_90": printable in any error message and
// usable in a memfd name, so nothing a terminal or a path would interpret.
bool valid_arch_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::string hex_byte(unsigned v) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", v & 0xffu);
  return s;
}

Error bad(const std::string& why) {
  return Error("rig.program: " + why);
}

}  // namespace

namespace program {

void checksum(std::span<const std::byte> file, unsigned char out[checksum_bytes]) {
  if (file.size() < header_bytes)
    throw std::invalid_argument("rig.program: checksum of a short file");
  if (sodium_init() < 0) throw std::runtime_error("rig: libsodium failed to initialise");
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, checksum_bytes);
  const auto* p = reinterpret_cast<const unsigned char*>(file.data());
  crypto_generichash_update(&st, p, checksum_offset);
  const std::size_t rest = checksum_offset + checksum_bytes;
  crypto_generichash_update(&st, p + rest, file.size() - rest);
  crypto_generichash_final(&st, out, checksum_bytes);
}

}  // namespace program

std::string_view format_name(TargetFormat format) noexcept {
  switch (format) {
    case TargetFormat::host_elf:
      return "host_elf";
    case TargetFormat::cuda_cubin:
      return "cuda_cubin";
    case TargetFormat::cuda_ptx:
      return "cuda_ptx";
  }
  return "unknown";
}

Result<Program> Program::parse(std::vector<std::byte> bytes) {
  using namespace program;
  const std::size_t n = bytes.size();
  if (n < header_bytes) {
    return bad("truncated: " + std::to_string(n) + " bytes, less than the " +
               std::to_string(header_bytes) + "-byte header");
  }
  const std::byte* p = bytes.data();
  if (std::memcmp(p, magic, sizeof magic) != 0) return bad("not a rig.program file (bad magic)");
  const std::uint32_t version = get_u32(p + version_offset);
  if (version != format_version) {
    return bad("format version " + std::to_string(version) + ", this reader knows only " +
               std::to_string(format_version));
  }
  const std::uint32_t count = get_u32(p + target_count_offset);
  if (count == 0) return bad("no targets");
  if (count > targets_max) {
    return bad(std::to_string(count) + " targets, more than the " + std::to_string(targets_max) +
               " allowed");
  }
  const std::uint64_t declared = get_u64(p + file_bytes_offset);
  if (declared != n) {
    return bad((declared > n ? "truncated: " : "trailing bytes: ") + std::string("header says ") +
               std::to_string(declared) + " bytes, file has " + std::to_string(n));
  }
  const std::size_t table_end = header_bytes + std::size_t{count} * target_record_bytes;
  if (table_end > n) {
    return bad("the table of " + std::to_string(count) + " targets ends at byte " +
               std::to_string(table_end) + ", past the end of the file (" + std::to_string(n) +
               " bytes)");
  }
  // Checked before any record is read: a damaged file is reported as damaged, not as whatever a
  // flipped bit happens to make of a field.
  unsigned char sum[checksum_bytes];
  checksum(bytes, sum);
  if (sodium_memcmp(sum, p + checksum_offset, checksum_bytes) != 0) {
    return bad("checksum mismatch: the file is damaged");
  }

  auto state = std::make_shared<State>();
  state->targets.reserve(count);
  std::set<std::pair<std::uint32_t, std::string>> seen;
  std::uint64_t next_free = table_end;  // payloads follow the table in record order, no overlap
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::byte* r = p + header_bytes + std::size_t{i} * target_record_bytes;
    const std::string where = "target " + std::to_string(i) + ": ";
    const std::uint32_t format = get_u32(r + record_format_offset);
    if (!known_format(format)) return bad(where + "unknown format " + std::to_string(format));
    const std::uint32_t flags = get_u32(r + record_flags_offset);
    if (flags != 0) {
      return bad(where + "flags are " + std::to_string(flags) + ", this reader knows none");
    }
    const char* arch = reinterpret_cast<const char*>(r + record_arch_offset);
    const std::size_t arch_len = strnlen(arch, arch_bytes);
    if (arch_len == arch_bytes) {
      return bad(where + "arch name is not NUL-terminated within its " +
                 std::to_string(arch_bytes) + " bytes");
    }
    if (arch_len == 0) return bad(where + "empty arch name");
    for (std::size_t k = 0; k < arch_len; ++k) {
      if (!valid_arch_char(arch[k])) {
        return bad(where + "arch name has byte " + hex_byte(static_cast<unsigned char>(arch[k])) +
                   " at position " + std::to_string(k) +
                   ", outside the name characters a-z A-Z 0-9 _ - .");
      }
    }
    for (std::size_t k = arch_len; k < arch_bytes; ++k) {
      if (arch[k] != '\0') return bad(where + "arch name padding is not all zero");
    }
    const std::uint64_t offset = get_u64(r + record_offset_offset);
    const std::uint64_t size = get_u64(r + record_bytes_offset);
    if (offset < next_free) {
      return bad(where + "payload at byte " + std::to_string(offset) +
                 " overlaps the table or an earlier payload (next free byte " +
                 std::to_string(next_free) + ")");
    }
    if (offset > n || size > n - offset) {
      return bad(where + "payload of " + std::to_string(size) + " bytes at byte " +
                 std::to_string(offset) + " runs past the end of the file (" + std::to_string(n) +
                 " bytes)");
    }
    if (size == 0) return bad(where + "empty payload");
    next_free = offset + size;
    std::string arch_name(arch, arch_len);
    if (!seen.emplace(format, arch_name).second) {
      return bad(where + "a second " + std::string(format_name(static_cast<TargetFormat>(format))) +
                 " target for " + arch_name);
    }
    state->targets.push_back(Target{static_cast<TargetFormat>(format), std::move(arch_name),
                                    std::span<const std::byte>(p + offset, size)});
  }
  if (next_free != n) {
    return bad("trailing bytes: " + std::to_string(n - next_free) + " after the last payload");
  }
  state->bytes = std::move(bytes);  // the vector's buffer, and so the spans, stay where they are
  return Program(std::move(state));
}

Result<Program> Program::read(const std::string& path) {
  auto bytes = program::read_file(path, program::file_bytes_max);
  if (!bytes) return Error(bytes.error());
  auto r = parse(std::move(*bytes));
  if (!r) return Error(path + ": " + r.error());
  return r;
}

const std::vector<Target>& Program::targets() const {
  return s_->targets;
}
std::span<const std::byte> Program::bytes() const {
  return s_->bytes;
}

std::vector<std::byte> write_program(std::span<const TargetSpec> targets) {
  using namespace program;
  if (targets.empty()) throw std::invalid_argument("rig.program: a program needs a target");
  if (targets.size() > targets_max) {
    throw std::invalid_argument("rig.program: " + std::to_string(targets.size()) +
                                " targets, more than the " + std::to_string(targets_max) +
                                " allowed");
  }
  std::set<std::pair<std::uint32_t, std::string>> seen;
  std::uint64_t total = header_bytes + targets.size() * target_record_bytes;
  for (const TargetSpec& t : targets) {
    const auto f = static_cast<std::uint32_t>(t.format);
    if (!known_format(f)) {
      throw std::invalid_argument("rig.program: unknown target format " + std::to_string(f));
    }
    if (t.arch.empty() || t.arch.size() >= arch_bytes) {
      throw std::invalid_argument("rig.program: arch name '" + t.arch + "' must have 1 to " +
                                  std::to_string(arch_bytes - 1) + " characters");
    }
    for (char c : t.arch) {
      if (!valid_arch_char(c)) {
        throw std::invalid_argument("rig.program: arch name '" + t.arch +
                                    "' has a character outside a-z A-Z 0-9 _ - .");
      }
    }
    if (t.payload.empty()) {
      throw std::invalid_argument("rig.program: empty payload for " +
                                  std::string(format_name(t.format)) + " " + t.arch);
    }
    if (!seen.emplace(f, t.arch).second) {
      throw std::invalid_argument("rig.program: two " + std::string(format_name(t.format)) +
                                  " targets for " + t.arch);
    }
    total += t.payload.size();
  }
  if (total > file_bytes_max) {
    throw std::invalid_argument("rig.program: " + std::to_string(total) + " bytes, more than the " +
                                std::to_string(file_bytes_max) + " a rig.program may have");
  }
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  std::byte* p = out.data();
  std::memcpy(p, magic, sizeof magic);
  put_u32(p + version_offset, format_version);
  put_u32(p + target_count_offset, static_cast<std::uint32_t>(targets.size()));
  put_u64(p + file_bytes_offset, total);
  std::size_t offset = header_bytes + targets.size() * target_record_bytes;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    std::byte* r = p + header_bytes + i * target_record_bytes;
    put_u32(r + record_format_offset, static_cast<std::uint32_t>(targets[i].format));
    std::memcpy(r + record_arch_offset, targets[i].arch.data(), targets[i].arch.size());
    put_u64(r + record_offset_offset, offset);
    put_u64(r + record_bytes_offset, targets[i].payload.size());
    std::memcpy(p + offset, targets[i].payload.data(), targets[i].payload.size());
    offset += targets[i].payload.size();
  }
  unsigned char sum[checksum_bytes];
  checksum(out, sum);
  std::memcpy(p + checksum_offset, sum, checksum_bytes);
  return out;
}

}  // namespace rig
