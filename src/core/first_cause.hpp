// FirstCause: a root cause that is set once, the first setter winning, and read without a lock.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace rig::detail {

// Owner: what records the cause (a device's timeline, a job's outcome). Threads: any; set and read
// take no lock, so a fork's child handler, a signal handler's read or any thread may use it
// whatever the others hold. Lifetime: the owner's; the text, once set, never changes or moves.
class FirstCause {
 public:
  FirstCause() = default;
  ~FirstCause() { delete cause_.load(std::memory_order_acquire); }
  FirstCause(const FirstCause&) = delete;
  FirstCause& operator=(const FirstCause&) = delete;

  // Records `why` unless a cause is recorded already; returns whether this call recorded it.
  bool set(const std::string& why) {
    if (is_set()) return false;
    auto cause = std::make_unique<const std::string>(why);
    const std::string* none = nullptr;
    if (!cause_.compare_exchange_strong(none, cause.get(), std::memory_order_acq_rel)) return false;
    cause.release();  // owned by cause_ from here
    return true;
  }
  bool is_set() const noexcept { return cause_.load(std::memory_order_acquire) != nullptr; }
  std::optional<std::string> get() const {
    const std::string* cause = cause_.load(std::memory_order_acquire);
    if (cause == nullptr) return std::nullopt;
    return *cause;
  }

 private:
  std::atomic<const std::string*> cause_{nullptr};
};

}  // namespace rig::detail
