// One CUDA device's engine: its stream, the work issued to it, and the two threads that keep it
// moving (the feeder issues work that must first wait on the host; the completion thread learns
// when issued work is done and publishes it on the device's timeline).
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/gpus.hpp"
#include "core/device.hpp"
#include "core/spin.hpp"

namespace rig::backends::cuda {

// Pinned host memory that copies from and into pageable process memory pass through, in slots
// that are filled by the host and emptied by DMA (or the reverse) in a pipeline. Owner: an
// Engine. Threads: the feeder only. Lifetime: made at the first staged copy, freed with the engine.
struct Staging {
  struct Slot {
    std::byte* memory = nullptr;
    CUevent done = nullptr;  // recorded after the DMA that last used the slot
    bool used = false;
  };
  std::vector<Slot> slots;
};

// Work on the GPU, in the order it was issued; complete once its event is.
struct InFlight {
  std::uint64_t value = 0;
  CUevent event = nullptr;
  bool launched = false;  // the work ran a kernel: check the stream once more before reporting
  detail::Work work;      // holds the buffers and images until the GPU is done with them
};

// What a stream wait on another device's work found.
enum class Order { reached, waited, not_issued };

// Everything a CUDA device's driver and its threads share. Owner: the CudaDriver and its two
// threads, jointly (shared_ptr), so that the last of them frees it whichever goes last. Threads:
// the mutable state is guarded by mu; the stream is issued to by one thread at a time (see
// CudaDriver::enqueue). Lifetime: until the driver is gone and both threads have ended.
struct Engine {
  Engine(const Api& api, const Gpu& gpu, std::weak_ptr<detail::DeviceCore> device);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Api& api;
  const Gpu& gpu;
  const std::weak_ptr<detail::DeviceCore> device;
  CUstream stream = nullptr;
  std::string setup_error;  // why the stream could not be made; the device is lost at once

  std::mutex mu;
  std::condition_variable feed_cv;      // the feeder waits here for work or stop
  std::condition_variable inflight_cv;  // the completion thread waits here for work or stop
  std::condition_variable exit_cv;      // the driver's destructor waits here for the threads
  std::deque<detail::Work> feed;        // waiting for the feeder, in submission order
  std::size_t feeding = 0;              // works given to the feeder and not yet fully issued
  std::deque<InFlight> inflight;        // issued, in value order
  // Works ever put in flight; read without the lock by the completion thread while it spins.
  std::atomic<std::uint64_t> issued{0};
  // Works ever let go (by the completion thread or a poller); written under mu, read without.
  std::atomic<std::uint64_t> retired{0};
  // Until when (steady ns) a thread that polls for the work itself (progress) finds finished work,
  // and the completion thread rests: renewed at each of its looks, cleared by stop_polling.
  std::atomic<std::int64_t> polled_until_ns{0};
  // The completion thread sleeps with no deadline (nothing in flight and no poller): work put in
  // flight must wake it. Under mu.
  bool completion_asleep = false;
  std::vector<CUevent> spare_events;
  bool stopping = false;
  int threads_running = 0;
  std::vector<std::thread::id> threads;
  Staging staging;  // the feeder's

  // An event for the end of a work, from the spares or new. Under mu.
  Outcome take_event_locked(CUevent* out);

  // Makes `waiter`'s stream wait for this device's work up to `value`, if that work is on the GPU.
  // Called by the waiter's issuing thread, with none of the waiter's locks held; a failed stream
  // wait is the waiter's failure, named in *failed.
  Order order_after(std::uint64_t value, const Engine& waiter, Outcome* failed);

  // Loses the device with `why` unless it is already gone or stopping. Never with mu held.
  void lose(const std::string& why);
};

// The engine of `d` if it is a CUDA device of this process, else nullptr.
Engine* engine_of(const detail::DeviceCore& d) noexcept;

// Staging for pageable host memory: a copy is cut into chunks that move through this many pinned
// slots, so that the host's memcpy of one chunk overlaps the DMA of the one before.
inline constexpr std::size_t staging_chunk_bytes = std::size_t{4} << 20;  // 4 MiB
inline constexpr std::size_t staging_slots = 3;

// The events that end each work and free each staging slot: no timing (cheaper to record), and no
// blocking sync. An event made with CU_EVENT_BLOCKING_SYNC makes the GPU raise an interrupt each
// time the stream reaches it, whether or not a thread ever waits on it: measured on an H200 (the
// benchmark's 64 B copy to CUDA:0 through an agent), one interrupt per copy, all handled by one
// core, which stalled whatever ran there (the controller, in that placement) for about 25 us and
// made the copy 59.6-64.5 us where it takes 37.8 us without. Work that outlasts the poll is
// waited for by looks between sleeps instead (wait_event).
inline constexpr unsigned event_flags = CU_EVENT_DISABLE_TIMING;

// How long the completion thread polls cuEventQuery for the oldest work in flight before it
// looks only between sleeps, and watches for new work before it sleeps: cuda_poll_ns_tunable
// (core/limits.hpp says why its default), read once. The first call raises std::invalid_argument
// for a bad value, so make_cuda_devices makes it before any thread of a device runs.
std::uint64_t poll_budget_ns();

// The engine's polls (the wait for an event, the watch for new work) are core/spin.hpp's spin_for:
// they yield the core often, for the agent's loop or a waiter that may share it.
using rig::detail::spin_for;

// Waits for `event` on the calling thread (the feeder or the completion thread, never a submitter):
// polls for poll_budget_ns(), then looks again after each sleep, every sleep an eighth of the time
// waited so far (cuda_sleep_share, within cuda_sleep_ns_min .. cuda_sleep_ns_max): work that runs
// long is found done at most an eighth of its time late, with at most a thousand looks a second.
// Returns CUDA_SUCCESS or the failing call's outcome. With `gave_way`, the wait also ends, setting
// it, as soon as a poller is looking (polled): the event is then the poller's to find.
Outcome wait_event(Engine& e, CUevent event, bool* gave_way = nullptr);

// Whether a thread that polls for the work itself has looked within cuda_poll_lease_ns and not
// said it stopped.
bool polled(const Engine& e) noexcept;

// What the feeder and the completion thread do first: take the device's context, and a timer slack
// of cuda_timer_slack_ns, so that wait_event's shortest sleeps are not stretched to the kernel's
// default slack (50 us).
void start_engine_thread(const Engine& e);

// Driver::progress: renews the poller's lease (polled_until_ns), then retires, oldest first, the
// work in flight whose event one look finds done and whose dependencies on other devices are
// reached, as the completion thread would: publishes it, or loses the device if the look failed,
// and lets it go. Returns at once if the engine's lock is held (the poller looks again soon).
void progress(Engine& e) noexcept;
// Driver::stop_polling: ends the lease and wakes the completion thread to take the work back.
void stop_polling(Engine& e) noexcept;

// The feeder and completion threads' bodies.
void feed_loop(std::shared_ptr<Engine> e);
void completion_loop(std::shared_ptr<Engine> e);

// Issues the parts of `work` to the stream, in order; host steps (staging through pinned memory,
// host-to-host copies) run on the calling thread, which is then the feeder. Sets *launched when a
// part ran a kernel. Throws DeviceError on a driver failure.
void issue_parts(Engine& e, const detail::Work& work, bool* launched);

// Whether every part of `work` runs on the GPU alone: no pageable host memory, no host-to-host
// copy. Such work may be issued from the submitting thread.
bool direct_only(const Engine& e, const detail::Work& work);

// A driver call failed while issuing: the device is lost with the text.
struct DeviceError {
  std::string why;
};

// Records the end of the work issued so far and puts it in flight. Throws DeviceError.
void finish_issue(Engine& e, detail::Work work, bool launched);

}  // namespace rig::backends::cuda
