// Reading and writing rig.program files. Every field of a file is checked before it is used;
// the checksum makes a damaged payload an error here rather than a crash in the loader.
#include <sodium.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <utility>

#include "program/format.hpp"
#include "rig/program.hpp"

namespace rig {

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

// BLAKE2b-256 of the file without its checksum field.
void checksum(std::span<const std::byte> file, unsigned char out[program::checksum_bytes]) {
  if (sodium_init() < 0) throw std::runtime_error("rig: libsodium failed to initialise");
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, program::checksum_bytes);
  const auto* p = reinterpret_cast<const unsigned char*>(file.data());
  crypto_generichash_update(&st, p, program::checksum_offset);
  const std::size_t rest = program::checksum_offset + program::checksum_bytes;
  crypto_generichash_update(&st, p + rest, file.size() - rest);
  crypto_generichash_final(&st, out, program::checksum_bytes);
}

bool known_format(std::uint32_t f) {
  return f == static_cast<std::uint32_t>(TargetFormat::host_elf) ||
         f == static_cast<std::uint32_t>(TargetFormat::cuda_cubin) ||
         f == static_cast<std::uint32_t>(TargetFormat::cuda_ptx);
}

bool valid_arch_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

Error bad(const std::string& why) {
  return Error("rig.program: " + why);
}

}  // namespace

Result<Program> Program::parse(std::vector<std::byte> bytes) {
  using namespace program;
  const std::size_t n = bytes.size();
  if (n < header_bytes) {
    return bad("truncated: " + std::to_string(n) + " bytes, less than the " +
               std::to_string(header_bytes) + "-byte header");
  }
  const std::byte* p = bytes.data();
  if (std::memcmp(p, magic, sizeof magic) != 0) return bad("not a rig.program file (bad magic)");
  const std::uint32_t version = get_u32(p + 8);
  if (version != format_version) {
    return bad("format version " + std::to_string(version) + ", this reader knows only " +
               std::to_string(format_version));
  }
  const std::uint32_t count = get_u32(p + 12);
  if (count == 0) return bad("no targets");
  if (count > targets_max) {
    return bad(std::to_string(count) + " targets, more than the " + std::to_string(targets_max) +
               " allowed");
  }
  const std::uint64_t declared = get_u64(p + 16);
  if (declared != n) {
    return bad((declared > n ? "truncated: " : "trailing bytes: ") + std::string("header says ") +
               std::to_string(declared) + " bytes, file has " + std::to_string(n));
  }
  const std::size_t table_end = header_bytes + std::size_t{count} * target_record_bytes;
  if (table_end > n) {
    return bad("truncated: the table of " + std::to_string(count) + " targets ends at byte " +
               std::to_string(table_end) + ", past the end (" + std::to_string(n) + ")");
  }
  unsigned char sum[checksum_bytes];
  checksum(bytes, sum);
  if (sodium_memcmp(sum, p + checksum_offset, checksum_bytes) != 0) {
    return bad("checksum mismatch: the file is damaged");
  }

  auto state = std::make_shared<State>();
  std::set<std::pair<std::uint32_t, std::string>> seen;
  std::uint64_t next_free = table_end;  // payloads follow the table in record order, no overlap
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::byte* r = p + header_bytes + std::size_t{i} * target_record_bytes;
    const std::string where = "target " + std::to_string(i) + ": ";
    const std::uint32_t format = get_u32(r);
    if (!known_format(format)) return bad(where + "unknown format " + std::to_string(format));
    if (get_u32(r + 4) != 0) return bad(where + "reserved flags are not zero");
    const char* arch = reinterpret_cast<const char*>(r + 8);
    const std::size_t arch_len = strnlen(arch, arch_bytes_max);
    if (arch_len == arch_bytes_max) return bad(where + "arch name is not NUL-terminated");
    if (arch_len == 0) return bad(where + "empty arch name");
    for (std::size_t k = 0; k < arch_len; ++k) {
      if (!valid_arch_char(arch[k]))
        return bad(where + "arch name has a byte that is not a name character");
    }
    for (std::size_t k = arch_len; k < arch_bytes_max; ++k) {
      if (arch[k] != '\0') return bad(where + "arch name padding is not zero");
    }
    const std::uint64_t offset = get_u64(r + 32);
    const std::uint64_t size = get_u64(r + 40);
    if (offset < next_free) {
      return bad(where + "payload at byte " + std::to_string(offset) +
                 " overlaps the table or an earlier payload (next free byte " +
                 std::to_string(next_free) + ")");
    }
    if (offset > n || size > n - offset) {
      return bad(where + "payload [" + std::to_string(offset) + ", +" + std::to_string(size) +
                 ") runs past the end of the file (" + std::to_string(n) + " bytes)");
    }
    if (size == 0) return bad(where + "empty payload");
    next_free = offset + size;
    std::string arch_name(arch, arch_len);
    if (!seen.emplace(format, arch_name).second) {
      return bad(where + "a second target of format " + std::to_string(format) + " for " +
                 arch_name);
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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Error(path + ": cannot open: " + std::strerror(errno));
  const std::streamoff size = in.tellg();
  if (size < 0) return Error(path + ": cannot read its size");
  if (static_cast<std::uint64_t>(size) > program::file_bytes_max) {
    return Error(path + ": " + std::to_string(size) + " bytes, larger than a rig.program may be");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) return Error(path + ": read failed");
  auto r = parse(std::move(bytes));
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
    throw std::invalid_argument("rig.program: more than " + std::to_string(targets_max) +
                                " targets");
  }
  std::set<std::pair<std::uint32_t, std::string>> seen;
  std::size_t total = header_bytes + targets.size() * target_record_bytes;
  for (const TargetSpec& t : targets) {
    const auto f = static_cast<std::uint32_t>(t.format);
    if (!known_format(f)) throw std::invalid_argument("rig.program: unknown target format");
    if (t.arch.empty() || t.arch.size() >= arch_bytes_max) {
      throw std::invalid_argument("rig.program: arch name '" + t.arch + "' must have 1 to " +
                                  std::to_string(arch_bytes_max - 1) + " characters");
    }
    for (char c : t.arch) {
      if (!valid_arch_char(c)) {
        throw std::invalid_argument("rig.program: arch name '" + t.arch + "' has a bad character");
      }
    }
    if (t.payload.empty()) throw std::invalid_argument("rig.program: empty payload for " + t.arch);
    if (!seen.emplace(f, t.arch).second) {
      throw std::invalid_argument("rig.program: two targets of one format for " + t.arch);
    }
    total += t.payload.size();
  }
  if (total > file_bytes_max) throw std::invalid_argument("rig.program: the program is too large");
  std::vector<std::byte> out(total);
  std::byte* p = out.data();
  std::memcpy(p, magic, sizeof magic);
  put_u32(p + 8, format_version);
  put_u32(p + 12, static_cast<std::uint32_t>(targets.size()));
  put_u64(p + 16, total);
  std::size_t offset = header_bytes + targets.size() * target_record_bytes;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    std::byte* r = p + header_bytes + i * target_record_bytes;
    put_u32(r, static_cast<std::uint32_t>(targets[i].format));
    std::memcpy(r + 8, targets[i].arch.data(), targets[i].arch.size());
    put_u64(r + 32, offset);
    put_u64(r + 40, targets[i].payload.size());
    std::memcpy(p + offset, targets[i].payload.data(), targets[i].payload.size());
    offset += targets[i].payload.size();
  }
  unsigned char sum[checksum_bytes];
  checksum(out, sum);
  std::memcpy(p + checksum_offset, sum, checksum_bytes);
  return out;
}

}  // namespace rig
