// Flow control of the submissions to a job's agents, in one place. A submit waits (docs/remote.md,
// "Remote devices") while its agent's connection is sending a message that the kernel could not
// take whole (SendFlow), and while its device holds more than inflight_bytes_max of work that the
// agent has not reported reached (DeviceFlow). The loop writes both; submitters read and wait.
// Nothing here allocates or locks: a signal handler's submission passes through.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.hpp"

namespace rig::remote {

// What `work` counts against its device's in-flight bytes: the bytes its copies carry, and
// part_overhead_bytes for the submission and for each of its parts. Taken at the submit and given
// back at REACHED, computed both times from the work itself, so no count travels beside it.
std::uint64_t inflight_cost(const rig::detail::Work& work) noexcept;

// One remote device's work in flight. Owner: the device's driver (RemoteDriver). Threads:
// submitters take and wait for room; the loop gives back when the agent reports work reached; stop
// comes from whoever closes or loses the device.
class DeviceFlow {
 public:
  // Waits while the device holds more than inflight_bytes_max, or until stopped (the submission's
  // next check then raises Lost). The caller's signal handlers may run meanwhile.
  void wait_for_room() const;
  void take(std::uint64_t bytes) noexcept;
  // Returns what reached work held, and wakes the submitters waiting for room.
  void give_back(std::uint64_t bytes) noexcept;
  // Wakes every waiter for good.
  void stop() noexcept;
  bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }
  // Whether no work of the device is in flight.
  bool idle() const noexcept { return inflight_bytes_.load(std::memory_order_acquire) == 0; }

 private:
  std::atomic<std::uint64_t> inflight_bytes_{0};
  std::atomic<std::uint32_t> progress_{0};  // bumped on every give_back and on stop, for waiters
  std::atomic<bool> stopped_{false};
};

// Whether each agent's connection of a job is sending, that is, has a write in libuv's queue that
// the kernel did not take at once. Owner: the handle's state (JobState). Threads: the loop sets it
// from each connection's sending watch; submitters wait on it.
class SendFlow {
 public:
  explicit SendFlow(std::size_t members)
      : sending_(std::make_unique<std::atomic<bool>[]>(members)), members_(members) {}

  // Loop thread: agent `member`'s connection starts or stops sending.
  void set_sending(std::size_t member, bool sending) noexcept;
  // Loop thread: wakes every waiter (the job failed: they find their devices lost).
  void wake_all() noexcept;
  // Waits while agent `member`'s connection is sending, unless `device` is stopped. The caller's
  // signal handlers may run meanwhile.
  void wait_while_sending(std::size_t member, const DeviceFlow& device) const;

 private:
  const std::unique_ptr<std::atomic<bool>[]> sending_;
  const std::size_t members_;
  std::atomic<std::uint32_t> progress_{0};  // bumped whenever a connection stops sending
};

}  // namespace rig::remote
