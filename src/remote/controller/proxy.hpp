// Devices of other machines as devices of this process: the driver behind each remote host
// ("CPU@NAME") and each proxy ("SIM:0@NAME"), and the Proxies that make them for a job's protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/flow.hpp"
#include "remote/controller/link.hpp"

namespace rig::remote {

// The driver of a remote host (agent device id 0) or of a proxy of one of its devices. Owner: its
// DeviceCore. Threads: any; the reach set is guarded by its mutex, the flow control is atomic, and
// everything that touches a connection goes to the loop through the job's link. Lifetime: the
// device's; it reaches the job through a weak reference, so a device outliving its job only raises
// Lost.
class RemoteDriver final : public rig::detail::Driver {
 public:
  RemoteDriver(std::weak_ptr<JobLink> link, std::size_t member, std::uint32_t id)
      : link_(std::move(link)), member_(member), id_(id) {}

  std::size_t member() const noexcept { return member_; }
  std::uint32_t id() const noexcept { return id_; }
  // Whether this device belongs to the job whose state is `state` (its link lives in the state).
  template <typename State>
  bool of_job(const std::shared_ptr<State>& state) const noexcept {
    return !link_.owner_before(state) && !state.owner_before(link_);
  }
  // Whether `other` is a device of the same machine of the same job (the agent orders its work).
  bool same_machine(const rig::detail::DeviceCore& other) const;
  // Records that work here may use memory of the agent's device `id`.
  void add_reach(std::uint32_t id);

  // The loop reports `work` done: what it counted returns, and submitters waiting for room wake.
  void reached(const rig::detail::Work& work) noexcept;

  std::uint64_t allocate(std::size_t bytes) override;
  void release(std::uint64_t address, std::size_t bytes) noexcept override;
  std::byte* host_pointer(std::uint64_t) const noexcept override { return nullptr; }
  bool reaches(const rig::detail::DeviceCore& other) const override;
  void admit(const rig::detail::Work& work) override;
  void ready(const rig::detail::Work& work) override;
  void enqueue(rig::detail::Work work) override;
  Result<std::unique_ptr<rig::detail::Module>> load(const Program& program) override;
  void stop() noexcept override { flow_.stop(); }

 private:
  const std::weak_ptr<JobLink> link_;
  const std::size_t member_;
  const std::uint32_t id_;
  mutable std::mutex reach_mu_;
  std::vector<std::uint32_t> reach_;  // agent device ids this device reaches
  DeviceFlow flow_;
  // The highest value the loop has reported reached (the loop writes it, submitters read it).
  std::atomic<std::uint64_t> reached_{0};
};

// The Proxies of a job of this process: each device gets a RemoteDriver on the job's link and
// joins this process's registry. Owner: the job's protocol. Threads: the loop thread.
class RemoteProxies final : public Proxies {
 public:
  explicit RemoteProxies(std::weak_ptr<JobLink> link) : link_(std::move(link)) {}

  std::shared_ptr<rig::detail::DeviceCore> make(std::size_t member, std::uint32_t id,
                                                rig::detail::DeviceInfo info) override;
  void add(const std::shared_ptr<rig::detail::DeviceCore>& device) override;
  void add_reach(rig::detail::DeviceCore& from, std::uint32_t to) override;
  void reached(rig::detail::DeviceCore& device, std::uint64_t value,
               const rig::detail::Work& work) noexcept override;

 private:
  const std::weak_ptr<JobLink> link_;
};

}  // namespace rig::remote
