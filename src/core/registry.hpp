// The process-wide state of the local runtime: its devices, its failure and the submission lock.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/device.hpp"

namespace rig::detail {

// Owner: the process (made on first use, never destroyed, so that worker threads and atexit
// handlers never see it half torn down). Threads: any.
class Registry {
 public:
  static Registry& get();

  // Adds a device made by a backend, so that fail() reaches it. Raises Lost once the process has
  // failed (the device is lost at once, too).
  void add(const std::shared_ptr<DeviceCore>& device);

  // Loses every device with `why`; the first cause wins.
  void fail(const std::string& why);
  std::optional<std::string> failure() const;
  // After fail: waits, until `until` at the latest, for work that had started on any device to
  // end (Driver::settle). Returns whether all of it did.
  bool settle(std::chrono::steady_clock::time_point until) const;
  // Raises rig::Lost if the process has failed.
  void check_not_failed() const;

  // Taken by every submission while it computes its dependencies, takes its timeline value and
  // queues its work, so that the order of buffer uses is one order across all devices.
  std::mutex& submission_mutex() noexcept { return submit_mu_; }

 private:
  Registry() = default;
  mutable std::mutex mu_;  // guards devices_ and failure_
  std::vector<std::weak_ptr<DeviceCore>> devices_;
  std::optional<std::string> failure_;
  std::mutex submit_mu_;
};

}  // namespace rig::detail
