// The runtime's model of a device: the state every kind shares (DeviceCore) and the small
// interface each backend implements (Driver). Backends know nothing of the network; the remote
// layer's proxies are one more Driver.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "core/pool.hpp"
#include "core/timeline.hpp"
#include "rig/program.hpp"
#include "rig/rig.hpp"

namespace rig::detail {

class BufferCore;
class DeviceCore;

// A program loaded by a driver. Owner: its ImageCore. Threads: any (find is const and thread-safe).
class Module {
 public:
  virtual ~Module() = default;
  // The entry point named `entry`, in the driver's own form; nullptr if the program has none.
  virtual const void* find(const std::string& entry) const = 0;
};

// Owner: the Image handles and the runs that use it. Lifetime: until the last of those is gone.
class ImageCore {
 public:
  ImageCore(Device d, std::unique_ptr<Module> m) : device(std::move(d)), module(std::move(m)) {}
  const Device device;
  const std::unique_ptr<Module> module;
};

// A point another device's work must reach before a submission may start.
struct Dep {
  std::shared_ptr<DeviceCore> device;
  std::uint64_t value;
};

// A validated copy; the buffers are held until the work is done.
struct CopyWork {
  std::shared_ptr<BufferCore> dst;
  std::size_t dst_offset;
  std::shared_ptr<BufferCore> src;
  std::size_t src_offset;
  std::size_t bytes;
};

// Where a buffer argument of a run went: its word, its access and the offset into the buffer. A
// proxy needs them to name the buffer on the wire; local drivers use the word alone.
struct RunBuffer {
  std::uint32_t word;
  Access access;
  std::size_t offset;
};

// An object of rig's other than memory that a run argument hands to the run's code (Arg::Object):
// a remote job's rail. Owner: the Arg and the work that carry it. Threads: any.
class RunObject {
 public:
  virtual ~RunObject() = default;
  // Raises std::invalid_argument unless a run on `d` may take it.
  virtual void check_run_on(const DeviceCore& d) const = 0;
};

// Where an object argument of a run went: its word. Only a driver that can place such objects (a
// proxy) ever receives one: check_run_on refuses every other.
struct RunObjectArg {
  std::uint32_t word;
  std::shared_ptr<const RunObject> object;
};

// A validated run: the entry resolved, buffer arguments turned into device addresses. Work's
// containers come from the block pool (core/pool.hpp): a submission may be made in a signal
// handler, where malloc is not safe.
struct RunWork {
  std::shared_ptr<ImageCore> image;
  const void* entry;
  Shape shape;
  PoolVector<std::uint64_t> words;
  PoolVector<std::shared_ptr<BufferCore>> buffers;  // held until the run is done
  PoolVector<RunBuffer> buffer_args;                // parallel to `buffers`
  PoolVector<RunObjectArg> objects;                 // words left 0 here
};

using WorkPart = std::variant<CopyWork, RunWork>;

// One submission as a driver receives it.
struct Work {
  std::uint64_t value;   // publish this on the device's timeline once every part is done
  PoolVector<Dep> deps;  // wait for these (on other devices) before the first part
  PoolVector<WorkPart> parts;
};

// A backend's side of one device. Owner: its DeviceCore. Threads: any; implementations guard their
// own state. Lifetime: the device's; stop() is called at least once before destruction.
class Driver {
 public:
  virtual ~Driver() = default;

  // Memory for a buffer of `bytes` (the budget is already reserved by the core); its address in
  // the form runs receive, or 0 if the device cannot provide it.
  virtual std::uint64_t allocate(std::size_t bytes) = 0;
  virtual void release(std::uint64_t address, std::size_t bytes) noexcept = 0;
  // For host buffers and backends whose memory the process can address directly.
  virtual std::byte* host_pointer(std::uint64_t address) const noexcept = 0;
  // Whether the process may read and write host_pointer's memory itself, in place of a copy by
  // this device, while no work uses it: an agent then moves a copy's bytes between the socket and
  // that memory with no staging. A device whose copies must take their own time says no.
  virtual bool direct_access() const noexcept { return false; }

  // Whether work on this device may use memory of `other`.
  virtual bool reaches(const DeviceCore& other) const = 0;

  // Before the submission lock: raises std::invalid_argument for work this driver cannot take
  // (beyond what the core checks), and may block for flow control (a proxy's in-flight bytes).
  // `work.deps` and `work.value` are not set yet. Local drivers take everything at once.
  virtual void admit(const Work& work) { (void)work; }

  // Under the submission lock, once `work.deps` is known and before a timeline value is given: a
  // driver that must see its dependencies done before it can send the work (a proxy copying from
  // this process's memory) waits for them here, or raises rig::Lost. Local drivers wait on their
  // own queues instead and return at once.
  virtual void ready(const Work& work) { (void)work; }

  // Queues `work` behind earlier work. Called with the submission lock held, so it must not block
  // on other devices' work; the driver publishes work.value on the timeline once it is done, or
  // loses the device.
  virtual void enqueue(Work work) = 0;

  // For a thread that polls for this device's work rather than sleeping on its timeline (an
  // agent's loop): publishes on the calling thread whatever issued work the driver can see is done
  // without waiting, so that the poller finds it at its next look instead of after a hand-off to
  // the driver's own thread and back (two switches of the core where they share one), and tells
  // the driver that the caller will look again soon, so that its own thread may rest meanwhile.
  // stop_polling says the caller will not look again (it sleeps on the timeline instead): the
  // driver's thread takes the work back at once. Neither blocks. Drivers whose work ends only on
  // their own threads have nothing to look at.
  virtual void progress() noexcept {}
  virtual void stop_polling() noexcept {}

  virtual Result<std::unique_ptr<Module>> load(const Program& program) = 0;

  // Stops taking work and drops queued work that has not started (the device is either drained,
  // by close, or lost). Never waits, since a loss may come from the driver's own thread or while
  // host code runs forever; the driver's destructor waits for its threads.
  virtual void stop() noexcept = 0;

  // After stop: waits, until `until` at the latest, for the work that had started when it stopped
  // (host code woken by the loss, returning) to end. Returns whether it ended. A process about to
  // exit after a failure calls it, so that host code gets a moment to finish what it says. Drivers
  // with no threads of their own have nothing to wait for.
  virtual bool settle(std::chrono::steady_clock::time_point until) noexcept {
    (void)until;
    return true;
  }
};

// Static facts about a device.
struct DeviceInfo {
  Kind kind;
  std::string name;
  std::string arch;
  std::uint64_t budget_bytes;
};

// Owner: the registry while the device is open, plus every handle, buffer and queued submission
// that refers to it. Threads: any. Lifetime: until the last reference goes.
class DeviceCore {
 public:
  explicit DeviceCore(DeviceInfo info) : info_(std::move(info)) {}
  ~DeviceCore();
  DeviceCore(const DeviceCore&) = delete;
  DeviceCore& operator=(const DeviceCore&) = delete;

  // Called once, right after construction, by the backend that made the device.
  void attach(std::unique_ptr<Driver> driver) { driver_ = std::move(driver); }

  const DeviceInfo& info() const noexcept { return info_; }
  Driver& driver() const noexcept { return *driver_; }
  Timeline& timeline() noexcept { return timeline_; }
  const Timeline& timeline() const noexcept { return timeline_; }

  // The last value a submission was given; guarded by the submission lock for writes.
  std::uint64_t submitted() const noexcept { return submitted_.load(std::memory_order_acquire); }
  std::uint64_t next_value() noexcept { return submitted_.fetch_add(1) + 1; }

  // Raises rig::Lost if lost, invalid_argument if closed.
  void check_usable() const;
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  // Loses the device with `why` (first cause wins): wakes its waiters and stops its driver.
  void lose(const std::string& why);
  // Driver::settle, for a device that is lost or closed.
  bool settle(std::chrono::steady_clock::time_point until) noexcept {
    return driver_ == nullptr || driver_->settle(until);
  }

  // Waits for submitted work (unless lost), stops the driver and frees every buffer's memory.
  void close();

  // Budget accounting and the registry of live allocations, so that close can free them.
  // Raises OutOfMemory when `bytes` does not fit.
  std::uint64_t allocate(BufferCore* buffer, std::size_t bytes);
  void release(BufferCore* buffer, std::uint64_t address, std::size_t bytes) noexcept;
  std::uint64_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }

 private:
  const DeviceInfo info_;
  std::unique_ptr<Driver> driver_;
  Timeline timeline_;
  std::atomic<std::uint64_t> submitted_{0};
  std::atomic<std::uint64_t> used_{0};
  std::atomic<bool> closed_{false};
  std::mutex mem_mu_;                     // guards live_ and the close/free race
  std::unordered_set<BufferCore*> live_;  // buffers holding memory of this device
};

// Memory on one device, and the record of the work that uses it (for ordering by memory).
// Owner: Buffer handles and the work that uses it. Threads: any; `uses` is guarded by the
// submission lock. Lifetime: until the last reference goes, when its memory returns to the device.
class BufferCore {
 public:
  // Allocates on `device`. OutOfMemory beyond the budget.
  BufferCore(std::shared_ptr<DeviceCore> device, std::size_t bytes);
  // Borrows `bytes` of process memory at `data` (on the host device).
  BufferCore(std::shared_ptr<DeviceCore> host, std::byte* data, std::size_t bytes);
  ~BufferCore();
  BufferCore(const BufferCore&) = delete;
  BufferCore& operator=(const BufferCore&) = delete;

  const std::shared_ptr<DeviceCore>& device() const noexcept { return device_.core(); }
  const Device& handle() const noexcept { return device_; }
  std::size_t size() const noexcept { return bytes_; }
  std::uint64_t address() const noexcept { return address_; }
  // The bytes, for memory the process addresses directly; raises invalid_argument once freed.
  std::byte* data() const;
  bool borrowed() const noexcept { return borrowed_; }

  // Called by the device's close: the memory is gone, every later use is misuse.
  void forget() noexcept { freed_.store(true, std::memory_order_release); }
  bool freed() const noexcept { return freed_.load(std::memory_order_acquire); }

  // The last write and the reads since, per device; guarded by the submission lock.
  struct Uses {
    std::optional<Dep> last_write;
    PoolVector<Dep> reads;  // at most one per device, the latest
  } uses;

  // Raises invalid_argument if the buffer's memory is gone.
  void check_usable() const;

 private:
  const Device device_;
  const std::size_t bytes_;
  const bool borrowed_;
  std::uint64_t address_ = 0;
  std::atomic<bool> freed_{false};
};

}  // namespace rig::detail
