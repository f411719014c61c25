// The rig.program layout's constants, shared by the reader, the writer, the tests and the fuzz
// target. docs/program.md describes the format; all integers are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rig::program {

// "RIGPROG" and a NUL: the first 8 bytes of every rig.program file.
inline constexpr char magic[8] = {'R', 'I', 'G', 'P', 'R', 'O', 'G', '\0'};
inline constexpr std::uint32_t format_version = 1;

// Header: magic[8], version u32, target_count u32, file_bytes u64, checksum[32].
inline constexpr std::size_t header_bytes = 56;
inline constexpr std::size_t version_offset = 8;
inline constexpr std::size_t target_count_offset = 12;
inline constexpr std::size_t file_bytes_offset = 16;
inline constexpr std::size_t checksum_offset = 24;
inline constexpr std::size_t checksum_bytes = 32;  // BLAKE2b-256 over every other byte of the file

// Target record, one per target right after the header: format u32, flags u32 (zero), arch[24]
// (the name, then NUL padding), offset u64 and bytes u64 of the payload.
inline constexpr std::size_t target_record_bytes = 48;
inline constexpr std::size_t record_format_offset = 0;
inline constexpr std::size_t record_flags_offset = 4;
inline constexpr std::size_t record_arch_offset = 8;
inline constexpr std::size_t arch_bytes = 24;  // so a name has at most 23 characters
inline constexpr std::size_t record_offset_offset = 32;
inline constexpr std::size_t record_bytes_offset = 40;

// Enough for every host level and every SM architecture with PTX beside, with room to spare; the
// bound keeps what a bad header can make the reader do small.
inline constexpr std::uint32_t targets_max = 64;
// A program file is read whole into memory; this bounds what a bad file can make us allocate.
inline constexpr std::uint64_t file_bytes_max = std::uint64_t{1} << 32;  // 4 GiB

// The checksum of `file` (at least header_bytes long): BLAKE2b-256 of every byte except the
// checksum field itself.
void checksum(std::span<const std::byte> file, unsigned char out[checksum_bytes]);

}  // namespace rig::program
