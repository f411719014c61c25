#include "core/registry.hpp"

#include <algorithm>

namespace rig::detail {

Registry& Registry::get() {
  static Registry* const registry = new Registry();  // deliberately never destroyed
  return *registry;
}

void Registry::add(const std::shared_ptr<DeviceCore>& device) {
  std::optional<std::string> failed;
  {
    std::lock_guard lock(mu_);
    std::erase_if(devices_, [](const std::weak_ptr<DeviceCore>& w) { return w.expired(); });
    devices_.push_back(device);
    failed = failure_;
  }
  if (failed) {
    device->lose(*failed);
    throw Lost(*failed);
  }
}

void Registry::fail(const std::string& why) {
  std::vector<std::shared_ptr<DeviceCore>> devices;
  {
    std::lock_guard lock(mu_);
    if (failure_) return;
    failure_ = why;
    for (const auto& w : devices_) {
      if (auto d = w.lock()) devices.push_back(std::move(d));
    }
  }
  for (const auto& d : devices) d->lose(why);
}

bool Registry::settle(std::chrono::steady_clock::time_point until) const {
  std::vector<std::shared_ptr<DeviceCore>> devices;
  {
    std::lock_guard lock(mu_);
    for (const auto& w : devices_) {
      if (auto d = w.lock()) devices.push_back(std::move(d));
    }
  }
  bool all = true;
  for (const auto& d : devices) all = d->settle(until) && all;
  return all;
}

std::optional<std::string> Registry::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void Registry::check_not_failed() const {
  if (auto f = failure()) throw Lost(*f);
}

}  // namespace rig::detail
