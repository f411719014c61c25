// What a job's work on this machine amounted to, counted for an operator (rigd's --metrics):
// devices and memory the job holds, submissions and copies applied, rail rounds sent and arrived,
// and whether a device of the job was lost. Off unless a process hands in where to count (rigd's
// job process: its page of shared memory), as io/counters.hpp is for the job's connections.
#pragma once

#include <atomic>
#include <cstdint>

namespace rig::remote {

// Every field is a lock-free atomic stored with relaxed order (a reader wants each value, not an
// order between them), so that the loop never waits for a reader in another process.
// Owner: whoever hands it to set_work_counters (it outlives the job). Threads: the loop writes;
// any thread or process reads. Lifetime: the owner's.
struct WorkCounters {
  // The job's state now.
  std::atomic<std::uint64_t> devices_open{0};  // devices the job opened (the host not counted)
  std::atomic<std::uint64_t> memory_bytes{0};  // bytes of the buffers the job holds
  // What the job did.
  std::atomic<std::uint64_t> submissions{0};
  std::atomic<std::uint64_t> copies{0};
  std::atomic<std::uint64_t> copy_bytes{0};
  std::atomic<std::uint64_t> rail_rounds_sent{0};  // rounds whose bytes this machine sent
  std::atomic<std::uint64_t> rail_bytes_sent{0};
  std::atomic<std::uint64_t> rail_rounds_arrived{0};  // rounds whose bytes arrived here
  std::atomic<std::uint64_t> rail_bytes_arrived{0};
  // 1 once the job failed because a device of it was lost (its cause is the device's own text).
  std::atomic<std::uint32_t> device_lost{0};

  // Adds `n` to `field`, if counting is on; the loop's one call per event.
  static void add(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept;
  static void take(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept;
};

// From now on this process's job counts into `counters` (null: no longer). Before the job starts.
void set_work_counters(WorkCounters* counters) noexcept;
WorkCounters* work_counters() noexcept;

}  // namespace rig::remote
