// The rig.program layout's constants, shared by the reader and the writer (docs/program.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rig::program {

// "RIGPROG" and a NUL: the first 8 bytes of every rig.program file.
inline constexpr char magic[8] = {'R', 'I', 'G', 'P', 'R', 'O', 'G', '\0'};
inline constexpr std::uint32_t format_version = 1;

// Header: magic[8], version u32, target_count u32, file_bytes u64, checksum[32].
inline constexpr std::size_t header_bytes = 56;
inline constexpr std::size_t checksum_offset = 24;
inline constexpr std::size_t checksum_bytes = 32;  // BLAKE2b-256 over every other byte of the file

// Target record: format u32, flags u32 (zero), arch[24] (NUL-padded), offset u64, bytes u64.
inline constexpr std::size_t target_record_bytes = 48;
inline constexpr std::size_t arch_bytes_max = 24;  // with at least one NUL

inline constexpr std::uint32_t targets_max = 64;
// A program file is read whole into memory; this bounds what a bad file can make us allocate.
inline constexpr std::uint64_t file_bytes_max = std::uint64_t{1} << 32;  // 4 GiB

}  // namespace rig::program
