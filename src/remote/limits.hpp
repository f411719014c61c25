// Every limit and constant of the remote layer (wire, keys, handshake, flow control, staging), with
// its unit, in one place. A peer's input is checked against these with ordinary code that stays in
// release builds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tunables.hpp"

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
inline constexpr std::uint32_t protocol_version = 2;

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
// A rail's transfers, and the rails a process holds at once (each takes two count words of a
// fixed table, so that a child of fork can raise them all: job/rail_count.hpp).
inline constexpr std::size_t rail_transfers_max = 4096;
inline constexpr std::size_t rails_max = 4096;
// The most pieces one write of a link's rail rounds gathers (a header and the bytes of each
// chunk): 64 small rounds in one system call, well inside the kernel's 1024 iovecs a writev.
inline constexpr std::size_t rail_write_pieces_max = 128;
// A program sent to an agent: as large as a rig.program file may be read.
inline constexpr std::uint64_t program_bytes_max = 4ull * 1024 * MiB;

// Flow control: a remote device holds at most this much work that its agent has not reported
// reached; a submit beyond it waits. Bounds the memory a fast controller can pile up at a slow
// agent (docs/remote.md, "Remote devices").
inline constexpr std::uint64_t inflight_bytes_max = 64 * MiB;
// What a submission's part counts in that bound besides the bytes it copies (and what the
// submission itself counts): its share of the message.
inline constexpr std::uint64_t part_overhead_bytes = 128;

// A submission's message of at most this many bytes, sent while its connection has nothing else
// to send, is written by the submitting thread itself rather than by the loop (io/direct_lane.hpp):
// it is copied to that thread's stack first, so that the loop may let go of the submission at once.
inline constexpr std::size_t direct_write_bytes_max = 1024;

// A connection that has not proven the key by then is dropped (the reactor's deadline).
inline constexpr std::uint64_t handshake_timeout_ms = 10'000;

// Strangers: connections an agent accepted that have not proven the key (docs/security.md,
// "Strangers"). Each holds a descriptor and a few KiB until it proves the key, is refused, times
// out or is dropped; together they are at most the smallest of these, and at that cap the oldest
// is dropped to make room for the newest, so that a peer that holds the key always gets in.
// A job's own strangers are its controller and at most agents_max - 1 other agents, each proving
// the key within a round trip: twice that leaves them room, and bounds what strangers cost an agent
// (about 2048 descriptors and a few MiB).
inline constexpr std::size_t strangers_max = 2 * agents_max;
// At most this percentage of the descriptors the process may open (RLIMIT_NOFILE's soft limit):
// the rest stay for the job's own connections, its devices and its files.
inline constexpr std::size_t strangers_descriptor_percent = 50;
// However low the descriptor limit, this many strangers may wait.
inline constexpr std::size_t strangers_min = 4;
// Drops to make room are logged once when they begin, then as a count at most this often.
inline constexpr std::int64_t strangers_log_interval_ms = 10'000;
// Once this many strangers have gone since the last time, or all of them, the agent hands the
// memory they freed back to the system (malloc_trim), at most once a second, so that a flood
// leaves no resident memory behind.
inline constexpr std::size_t strangers_trim_count = 256;
inline constexpr std::int64_t strangers_trim_interval_ms = 1000;

// An agent keeps the host memory that bulk copies were staged in for the next copies, up to this
// much, and lets it all go after this long without work: a fresh buffer costs a zeroed page per
// 4 KiB, about a tenth of a large copy's time (bench/README.md).
inline constexpr std::size_t staging_cache_bytes_max = 1024 * MiB;
inline constexpr std::int64_t staging_idle_release_ms = 1000;

// The longest a piece of news nobody waits for (a rail's count of a round that host code started)
// waits for its connection's next write, or for its loop to go idle, before it goes in a write of
// its own: long enough that a busy pipeline's counts go a few hundred at a time, short enough that
// the controller's view of such a rail is never more than this behind.
inline constexpr std::uint64_t idle_work_delay_us = 500;
// The longest news of a round the controller started that nobody waits for (the source's sent
// count to the controller, which the destination's arrived count says too; the destination's
// arrived count to a source agent; RAIL_AWAIT to the destination) waits for its connection's next
// write, whether or not the loop goes idle meanwhile: on a core that the job's processes share the
// loops go idle after nearly every round, so news sent at idle cost a write and a read a round. In
// whole milliseconds, as libuv's timers count.
inline constexpr std::uint64_t later_news_delay_ms = 1;

// How often a connection whose socket host code reads (ReadLane) looks at it: readers' bytes
// count as heard, the rounds they took are reported (so at most this late), and the loop reads
// again where bytes wait with no reader. One libuv timer tick.
inline constexpr std::uint64_t read_lane_watch_ms = 1;
// What host code reading a rail's rounds off its socket reads at once (beyond a body it places
// straight): a few small rounds, and little to copy out of a large one.
inline constexpr std::size_t read_lane_read_bytes = 16 * 1024;

// A job process whose job failed exits (its devices are lost), but first gives host code that was
// running, woken by the raised rails, this long to return: host code that logs or cleans up on a
// failure then finishes, and host code that never returns delays the exit by no more than this.
inline constexpr std::int64_t failed_job_host_code_ms = 1000;

// The remote layer's tunables (core/tunables.hpp says how each is read).

// How long the loop polls after activity before it sleeps in epoll again. Waking a thread that
// sleeps costs 30-80 us on small VMs (DESIGN.md section 5), and once both ends of a job poll, a
// SIM copy's whole round trip takes about 60 us there (bench/README.md): 100 us catches the answer
// and the next request without a wake-up (50 us missed half of them), and bounds what a lone
// request costs. The poll yields the core at every turn, and an idle loop (heartbeats only) never
// polls. RIG_LOOP_SPIN_US overrides it (0: never poll), for the benchmark's comparison.
inline constexpr std::uint64_t loop_spin_us_default = 100;
inline constexpr std::uint64_t loop_spin_us_max = 1'000'000;
inline constexpr rig::detail::Tunable loop_spin_us_tunable{
    "RIG_LOOP_SPIN_US", "a time in microseconds", loop_spin_us_default, loop_spin_us_max};
// How long host code reading a rail's rounds off its socket (ReadLane) looks for the next bytes
// before it sleeps in poll(): as long as a loop polls after activity, for the same reason.
inline constexpr std::uint64_t read_lane_spin_ns = loop_spin_us_default * 1000;

// How long an agent's loop polls a device's timeline after giving it work, before it asks a helper
// thread to sleep on it instead. Short work (a small copy, a tiny kernel) ends within the budget
// and is reported without a thread wake-up, which costs tens of microseconds on small VMs; long
// work costs the loop no more than this. RIG_AGENT_POLL_US overrides it (0: never poll), for the
// benchmark's comparison of the two paths.
inline constexpr std::uint64_t agent_poll_us_default = 200;
inline constexpr std::uint64_t agent_poll_us_max = 1'000'000;
inline constexpr rig::detail::Tunable agent_poll_us_tunable{
    "RIG_AGENT_POLL_US", "a time in microseconds", agent_poll_us_default, agent_poll_us_max};

// Every tunable above, for a program's check at its start (rigd's).
inline constexpr rig::detail::Tunable remote_tunables[] = {loop_spin_us_tunable,
                                                           agent_poll_us_tunable};

}  // namespace rig::remote
