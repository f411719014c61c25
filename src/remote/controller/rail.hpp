// Rails on the controller: the handle's state (RailCore), the device whose timeline orders the
// controller's rounds with other work by memory (RailDriver), and the calls of rig/remote.hpp
// (rail, Rail's members, Arg::rail, record). The loop's side is the protocol's (RailSide).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/flow.hpp"
#include "remote/controller/link.hpp"
#include "remote/job/job.hpp"
#include "remote/job/rail_count.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

struct JobState;

// The driver of a rail's device: a submission to it is one controller round, its copies the
// rail's transfers. Owner: the rail's device. Threads: any (go's), as a proxy's driver.
class RailDriver final : public rig::detail::Driver, public OrderedByAgent {
 public:
  RailDriver(std::weak_ptr<JobLink> link, std::uint32_t id, std::size_t source,
             std::size_t destination, std::shared_ptr<rig::detail::DeviceCore> from_host,
             std::shared_ptr<rig::detail::DeviceCore> to_host)
      : link_(std::move(link)),
        id_(id),
        source_(source),
        destination_(destination),
        from_(std::move(from_host)),
        to_(std::move(to_host)) {}

  std::uint32_t id() const noexcept { return id_; }
  // Whether both ends are agents, and whether member `m` is one of them: that agent then orders
  // the rail's controller rounds with the work sent to it, so the controller need not wait.
  bool between_agents() const noexcept {
    return source_ != RailPlan::controller && destination_ != RailPlan::controller;
  }
  bool ends_at(std::size_t m) const noexcept { return m == source_ || m == destination_; }
  bool ordered_by(std::size_t m) const noexcept override { return between_agents() && ends_at(m); }
  template <typename State>
  bool of_job(const std::shared_ptr<State>& state) const noexcept {
    return !link_.owner_before(state) && !state.owner_before(link_);
  }
  // A controller round has arrived: what it counted returns.
  void arrived(const rig::detail::Work& work) noexcept { flow_.give_back(inflight_cost(work)); }

  std::uint64_t allocate(std::size_t) override { return 0; }
  void release(std::uint64_t, std::size_t) noexcept override {}
  std::byte* host_pointer(std::uint64_t) const noexcept override { return nullptr; }
  bool reaches(const rig::detail::DeviceCore& other) const override {
    return &other == from_.get() || &other == to_.get();
  }
  void admit(const rig::detail::Work& work) override;
  void ready(const rig::detail::Work& work) override;
  void enqueue(rig::detail::Work work) override;
  Result<std::unique_ptr<rig::detail::Module>> load(const Program&) override {
    return Error("a rail loads no programs");
  }
  void stop() noexcept override { flow_.stop(); }

 private:
  // Whether none of the work a round follows (its deps) is still to be done on the destination's
  // machine: work of a device there, or a round of another rail that ends there.
  bool nothing_due_at_destination(const rig::detail::Work& work) const;

  const std::weak_ptr<JobLink> link_;
  const std::uint32_t id_;
  const std::size_t source_, destination_;
  const std::shared_ptr<rig::detail::DeviceCore> from_, to_;
  DeviceFlow flow_;
};

// What a Rail handle refers to. Owner: the handles and the runs given the rail (Arg::rail).
// Threads: any. Lifetime: until the last of those goes; the ends then let go of the rail too.
struct RailCore final : RailObject {
  RailCore() = default;
  ~RailCore() override;

  std::uint32_t id = 0;
  pid_t pid = 0;  // the controller's: in a child of fork the rail is raised
  Device from, to;
  std::size_t source = RailPlan::controller, destination = RailPlan::controller;
  std::vector<Transfer> transfers;
  std::vector<Part> parts;  // one copy per transfer: a round, as go() submits it
  std::shared_ptr<RailCounts> counts;
  std::shared_ptr<rig::detail::DeviceCore> device;
  std::weak_ptr<JobLink> link;
  std::weak_ptr<JobState> job;  // for its close
  std::shared_ptr<JobOutcome> outcome;
  // Set once a run has been given the rail: its rounds start where host code runs from then on.
  mutable std::atomic<bool> in_host_code{false};

  // Raises Lost with the root cause if the job has failed (or this is a child of fork).
  void check_not_failed() const;
  void check_run_on(const rig::detail::DeviceCore& d) const override;
  std::uint32_t rail_id() const noexcept override { return id; }
};

}  // namespace rig::remote
