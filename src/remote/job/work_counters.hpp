// What a job's work on this machine amounted to, counted for an operator (rigd's --metrics):
// devices and memory the job holds, submissions and copies applied, rail rounds sent and arrived,
// and whether a device of the job was lost. Off unless a process hands in where to count (rigd's
// job process: its page of shared memory), as io/counters.hpp is for the job's connections.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "remote/io/counters.hpp"

namespace rig::remote {

// The devices of one job whose memory is counted one by one (the host and the devices it opened);
// those past it count only in the totals. Names as the device gives them ("SIM:0", "CUDA:3").
inline constexpr std::size_t work_devices_max = 32;
inline constexpr std::size_t work_device_name_bytes = 32;

// Every field is a lock-free atomic stored with relaxed order (a reader wants each value, not an
// order between them), so that the loop never waits for a reader in another process.
// Owner: whoever hands it to set_work_counters (it outlives the job). Threads: the loop writes,
// and host code reading a rail's rounds itself counts them; any thread or process reads. Lifetime:
// the owner's.
struct WorkCounters {
  // One device the job holds on this machine, and the bytes of its buffers.
  struct DeviceUse {
    SharedText<work_device_name_bytes> name;  // empty: a slot not used yet
    std::atomic<std::uint64_t> memory_bytes{0};
  };

  // The job's state now.
  std::atomic<std::uint64_t> devices_open{0};       // devices the job opened (the host not counted)
  std::atomic<std::uint64_t> memory_bytes{0};       // bytes of the buffers the job holds
  std::array<DeviceUse, work_devices_max> devices;  // in the order first used
  // What the job did.
  std::atomic<std::uint64_t> submissions{0};
  std::atomic<std::uint64_t> copies{0};
  std::atomic<std::uint64_t> copy_bytes{0};
  std::atomic<std::uint64_t> rail_rounds_sent{0};  // rounds whose bytes this machine sent
  std::atomic<std::uint64_t> rail_bytes_sent{0};
  std::atomic<std::uint64_t> rail_rounds_arrived{0};  // rounds whose bytes arrived here
  std::atomic<std::uint64_t> rail_bytes_arrived{0};
  // Of those, rounds that host code waiting for them read off the socket itself (the read lane),
  // not the loop: a host-code pipeline's rounds mostly should be.
  std::atomic<std::uint64_t> rail_rounds_host_read{0};
  // 1 once the job failed because a device of it was lost (its cause is the device's own text).
  std::atomic<std::uint32_t> device_lost{0};

  // Every count back to 0 and every slot free, by the owner while no process counts into it.
  void clear() noexcept;

  // Adds `n` to `field`, if counting is on; the loop's one call per event.
  static void add(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept;
  static void take(std::atomic<std::uint64_t> WorkCounters::*field, std::uint64_t n) noexcept;
  // The job holds `device` (a slot is taken for it, if one is free), and `bytes` more or fewer of
  // its memory; the totals likewise. Only the loop's thread calls these.
  static void device_opened(std::string_view device) noexcept;
  static void memory_made(std::string_view device, std::uint64_t bytes) noexcept;
  static void memory_freed(std::string_view device, std::uint64_t bytes) noexcept;

 private:
  // The slot of `device`, taken if it has none and one is free; null if none is.
  DeviceUse* slot(std::string_view device) noexcept;
};

// From now on this process's job counts into `counters` (null: no longer). Before the job starts.
inline void set_work_counters(WorkCounters* counters) noexcept {
  CountsAt<WorkCounters>::set(counters);
}
inline WorkCounters* work_counters() noexcept {
  return CountsAt<WorkCounters>::get();
}

}  // namespace rig::remote
