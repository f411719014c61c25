// The completion thread: learns when the oldest work in flight is done (polling, then looking
// between sleeps), checks that no kernel left the context broken, publishes the work's value and
// lets the work go; and the same done by a thread that polls for its work itself (progress), while
// the completion thread rests.
#include "backends/cuda/engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "core/limits.hpp"

namespace rig::backends::cuda {
namespace {

// After the last work completes, watches for the next for the poll budget before the thread goes
// to sleep: a submitter that issues, waits and issues again then never pays for waking it. Not
// while a poller looks: the work is its to find.
void linger(const Engine& e) {
  spin_for(poll_budget_ns(), [&] {
    return e.issued.load(std::memory_order_acquire) != e.retired.load(std::memory_order_acquire) ||
           polled(e);
  });
}

// A kernel that traps can let the event after it report success while the context is already
// broken; the stream's state says so. Work after it may still run: NOT_READY is fine.
Outcome stream_state(const Engine& e) {
  const CUresult r = e.api.cuStreamQuery.fn(e.stream);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return {};
  return Outcome{r, failure_text(e.api, e.gpu.name, e.api.cuStreamQuery.name, r)};
}

// Takes the oldest work in flight off the list, its event back to the spares. Under mu; the
// caller lets the work go outside it (its buffers may be the last references).
InFlight take_front_locked(Engine& e) {
  InFlight f = std::move(e.inflight.front());
  e.inflight.pop_front();
  e.retired.fetch_add(1, std::memory_order_release);
  e.spare_events.push_back(f.event);
  return f;
}

// Publishes the oldest work in flight if it is still the one of `value` (a poller may have
// retired it meanwhile) and `o` is good, and lets it go; loses the device if `o` is a failure.
// Without the lock held.
void retire(Engine& e, std::uint64_t value, Outcome o) {
  auto device = e.device.lock();
  InFlight done;
  {
    std::lock_guard lock(e.mu);
    if (e.inflight.empty() || e.inflight.front().value != value) return;
    if (o && !e.stopping && device) device->timeline().publish(value);
    done = take_front_locked(e);
  }
  if (!o) e.lose(o.why);
  // Outside the lock: the work's buffers, or `device` itself, may be the last references.
  done = InFlight{};
  device.reset();
}

}  // namespace

void progress(Engine& e) noexcept {
  e.polled_until_ns.store(
      detail::steady_ns() + static_cast<std::int64_t>(detail::cuda_poll_lease_ns),
      std::memory_order_release);
  const auto device = e.device.lock();
  if (!device) return;
  ContextScope scope(e.api, e.gpu.context);
  bool stream_checked = false;
  for (;;) {
    InFlight done;
    Outcome outcome;
    {
      // Not behind the completion thread or the feeder: they hold the lock only for a moment, and
      // the poller looks again soon.
      std::unique_lock lock(e.mu, std::try_to_lock);
      if (!lock.owns_lock() || e.stopping || e.inflight.empty()) return;
      InFlight& f = e.inflight.front();
      const bool deps_reached = std::all_of(
          f.work.deps.begin(), f.work.deps.end(),
          [](const detail::Dep& dep) { return dep.device->timeline().reached() >= dep.value; });
      if (!deps_reached) return;  // its publish waits for theirs: the completion thread's
      const CUresult r = e.api.cuEventQuery.fn(f.event);
      if (r == CUDA_ERROR_NOT_READY) return;
      if (r != CUDA_SUCCESS) {
        outcome = Outcome{r, failure_text(e.api, e.gpu.name, e.api.cuEventQuery.name, r)};
      } else if (f.launched && !stream_checked) {
        outcome = stream_state(e);  // once a look: it covers every kernel issued so far
        stream_checked = true;
      }
      // Published before it leaves the list, as order_after expects.
      if (outcome) device->timeline().publish(f.value);
      done = take_front_locked(e);
    }
    // Outside the lock: the work's buffers may be the last references.
    if (!outcome) return e.lose(outcome.why);
  }
}

void stop_polling(Engine& e) noexcept {
  e.polled_until_ns.store(0, std::memory_order_release);
  std::lock_guard lock(e.mu);
  if (!e.inflight.empty()) e.inflight_cv.notify_one();
}

void completion_loop(std::shared_ptr<Engine> e) {
  pthread_setname_np(pthread_self(), "rig-cuda-done");
  start_engine_thread(*e);
  for (;;) {
    linger(*e);
    CUevent event = nullptr;
    std::uint64_t value = 0;
    bool launched = false;
    bool stopping = false;
    detail::PoolVector<detail::Dep> deps;
    {
      std::unique_lock lock(e->mu);
      for (;;) {
        // Once stopped, work already on the GPU is still waited for before its buffers are let go.
        if (e->stopping) break;
        // While a poller looks, it finds the work: rest until it stops (stop_polling wakes this
        // thread) or its lease runs out, with no wake-up for work it is given meanwhile.
        const std::int64_t until = e->polled_until_ns.load(std::memory_order_acquire);
        if (detail::steady_ns() < until) {
          e->inflight_cv.wait_until(
              lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(until)));
          continue;
        }
        if (!e->inflight.empty()) break;
        e->completion_asleep = true;
        e->inflight_cv.wait(lock);
        e->completion_asleep = false;
      }
      if (e->inflight.empty()) break;  // stopping, and nothing left
      const InFlight& f = e->inflight.front();
      event = f.event;
      value = f.value;
      launched = f.launched;
      deps = f.work.deps;
      // Read here, under the lock that stop() writes it under: read during the wait below, it
      // raced with stop() (TSan). If stop() comes after, a give-way only brings this thread back
      // to the top of the loop, where it sees it.
      stopping = e->stopping;
    }
    bool gave_way = false;
    Outcome o = wait_event(*e, event, stopping ? nullptr : &gave_way);
    if (gave_way) continue;  // a poller looks now; the entry is its, or ours again later
    if (o && launched) o = stream_state(*e);
    // Work ordered behind another device's by a stream wait is only good if that device's work
    // was: its value is published before ours (it may lag its event by a moment), and if that
    // device was lost instead, so is this one, with the same cause.
    if (o) {
      try {
        for (const detail::Dep& dep : deps) dep.device->timeline().wait(dep.value);
      } catch (const Lost& l) {
        o = Outcome{CUDA_ERROR_UNKNOWN, l.what()};
      }
    }
    deps.clear();
    retire(*e, value, std::move(o));
  }
  std::lock_guard lock(e->mu);
  --e->threads_running;
  e->exit_cv.notify_all();
}

}  // namespace rig::backends::cuda
