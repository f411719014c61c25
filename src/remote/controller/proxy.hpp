// Devices of other machines as devices of this process: the driver behind each remote host
// ("CPU@NAME") and each proxy ("SIM:0@NAME"), and the loop's record of what each agent owes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/runtime.hpp"
#include "remote/wire/messages.hpp"

namespace rig::remote {

struct JobState;

// The answer to a round trip (OPEN, MAKE, LOAD), or the job's root cause if the job failed or
// ended first. Owner: shared by the caller waiting for it and the loop. Threads: the loop fills it
// once, then sets `done`; the caller reads it after.
struct Reply {
  Signal done;
  std::optional<Message> answer;
  std::vector<Device> devices;  // OPENED's devices, as proxies
  std::string failed;           // the cause when there is no answer
};

// One bulk copy into this process's memory that an agent sends back in DATA frames.
struct CopyBack {
  std::byte* at;
  std::size_t bytes;
};

// What an agent owes the controller next, in the order the controller sent the messages that ask
// for it. Owner: its member's queue on the loop thread.
struct Expect {
  enum class Kind : std::uint8_t { reached, opened, made, loaded };
  Kind kind = Kind::reached;
  std::shared_ptr<Reply> reply;  // for the round trips
  // For a submission: where REACHED goes, the bytes its DATA frames fill, and the work itself,
  // held so that its buffers live until the agent has done it.
  std::shared_ptr<rig::detail::DeviceCore> device;
  std::uint32_t device_id = 0;
  std::uint64_t value = 0;
  std::uint64_t inflight_bytes = 0;
  rig::detail::PoolVector<CopyBack> copies;
  std::size_t copy_index = 0;
  std::size_t copy_done = 0;
  rig::detail::Work work;
};

// The driver of a remote host (agent device id 0) or of a proxy of one of its devices. Owner: its
// DeviceCore. Threads: any; the reach set is guarded by its mutex, the in-flight count is atomic,
// and everything that touches a connection is posted to the loop. Lifetime: the device's; it
// reaches the job through a weak reference, so a device outliving its job only raises Lost.
class RemoteDriver final : public rig::detail::Driver {
 public:
  RemoteDriver(std::weak_ptr<JobState> job, std::size_t member, std::uint32_t id)
      : job_(std::move(job)), member_(member), id_(id) {}

  std::size_t member() const noexcept { return member_; }
  std::uint32_t id() const noexcept { return id_; }
  const std::weak_ptr<JobState>& job() const noexcept { return job_; }
  // Whether `other` is a device of the same machine of the same job (the agent orders its work).
  bool same_machine(const rig::detail::DeviceCore& other) const;
  // Records that work here may use memory of the agent's device `id`.
  void add_reach(std::uint32_t id);

  // The loop reports work done (its in-flight bytes return) and wakes submitters waiting for room.
  void reached(std::uint64_t inflight_bytes) noexcept;

  std::uint64_t allocate(std::size_t bytes) override;
  void release(std::uint64_t address, std::size_t bytes) noexcept override;
  std::byte* host_pointer(std::uint64_t) const noexcept override { return nullptr; }
  bool reaches(const rig::detail::DeviceCore& other) const override;
  void admit(const rig::detail::Work& work) override;
  void ready(const rig::detail::Work& work) override;
  void enqueue(rig::detail::Work work) override;
  Result<std::unique_ptr<rig::detail::Module>> load(const Program& program) override;
  void stop() noexcept override;

 private:
  std::shared_ptr<JobState> live_job() const;
  void wait_while_sending();

  const std::weak_ptr<JobState> job_;
  const std::size_t member_;
  const std::uint32_t id_;
  mutable std::mutex reach_mu_;
  std::vector<std::uint32_t> reach_;  // agent device ids this device reaches
  std::atomic<std::uint64_t> inflight_bytes_{0};
  std::atomic<std::uint32_t> progress_{0};  // bumped on every report and on stop, for waiters
  std::atomic<bool> stopped_{false};
};

// Sends `message` (and `payload` after it in PAYLOAD frames) to agent `member` of `job` and waits
// for its answer. Raises rig::Lost with the job's cause if the job fails first, or "the job has
// closed". `keep` holds `payload`'s memory until the bytes are written, or the write given up.
std::shared_ptr<Reply> round_trip(const std::shared_ptr<JobState>& job, std::size_t member,
                                  const Message& message, Expect::Kind kind,
                                  std::span<const std::uint8_t> payload = {},
                                  std::shared_ptr<const void> keep = {});

}  // namespace rig::remote
