// Every limit and constant of the remote layer (wire, keys, handshake, flow control, staging), with
// its unit, in one place. A peer's input is checked against these with ordinary code that stays in
// release builds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rig::remote {

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t MiB = 1024 * KiB;

// Keys. A key shorter than 16 bytes is too easy to guess; one longer than 4 KiB is a mistake (the
// wrong file), not more security.
inline constexpr std::size_t key_bytes_min = 16;
inline constexpr std::size_t key_bytes_max = 4 * KiB;
// What `rig keygen` writes: 256 bits, as much as the MAC can use.
inline constexpr std::size_t keygen_bytes = 32;

// The version this build speaks. A greeting from another version is refused, never half-parsed.
inline constexpr std::uint32_t protocol_version = 1;

// Frames. The length field counts the type byte and the body. Bulk copies will carry 1-2 MiB of
// payload per frame (the write size that keeps TCP streaming at full speed), so 4 MiB leaves room
// for their fixed fields while bounding what one peer can make us buffer.
inline constexpr std::size_t frame_length_field_bytes = 4;
inline constexpr std::size_t frame_header_bytes = frame_length_field_bytes + 1;
inline constexpr std::size_t frame_bytes_max = 4 * MiB;

// A root cause carried by ABORT. Longer causes are cut by the sender (see clamp_reason).
inline constexpr std::size_t reason_bytes_max = 16 * KiB;

// Handshake. Names are "HOST:PORT#N" or a launcher's NAME: a DNS name is at most 253 bytes, so 1
// KiB is generous and still keeps a proof small.
inline constexpr std::size_t name_bytes_max = 1 * KiB;
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t instance_id_bytes = 16;
inline constexpr std::size_t job_id_bytes = 16;
inline constexpr std::size_t mac_bytes = 32;
// Agents in one job: a bound on what a JOIN may make an agent dial and allocate.
inline constexpr std::size_t agents_max = 1024;

// Remote devices. A submission's parts and a run's arguments are bounded as the local runtime
// bounds them; a device list as generously as anyone has GPUs in one machine.
inline constexpr std::size_t wire_parts_max = 4096;
inline constexpr std::size_t wire_args_max = 256;
inline constexpr std::size_t wire_devices_max = 1024;
inline constexpr std::size_t wire_reaches_max = wire_devices_max * wire_devices_max;
// Bulk bytes (copies, programs) travel in PAYLOAD and DATA frames of at most this much: big enough
// that TCP streams at full speed, small enough that the frame limit keeps its meaning.
inline constexpr std::size_t chunk_bytes = 1 * MiB;
// A program sent to an agent: as large as a rig.program file may be read.
inline constexpr std::uint64_t program_bytes_max = 4ull * 1024 * MiB;

// Flow control: a remote device holds at most this much work that its agent has not reported
// reached; a submit beyond it waits. Bounds the memory a fast controller can pile up at a slow
// agent (docs/remote.md, "Remote devices").
inline constexpr std::uint64_t inflight_bytes_max = 64 * MiB;
// What a submission's part counts in that bound besides the bytes it copies (and what the
// submission itself counts): its share of the message.
inline constexpr std::uint64_t part_overhead_bytes = 128;

// A connection that has not proven the key by then is dropped (the reactor's deadline).
inline constexpr std::uint64_t handshake_timeout_ms = 10'000;

// An agent keeps the host memory that bulk copies were staged in for the next copies, up to this
// much, and lets it all go after this long without work: a fresh buffer costs a zeroed page per
// 4 KiB, about a tenth of a large copy's time (bench/README.md).
inline constexpr std::size_t staging_cache_bytes_max = 1024 * MiB;
inline constexpr std::int64_t staging_idle_release_ms = 1000;

}  // namespace rig::remote
