// The completion thread: learns when the oldest work in flight is done (polling, then sleeping in
// the driver), checks that no kernel left the context broken, and publishes the work's value.
#include "backends/cuda/engine.hpp"

namespace rig::backends::cuda {
namespace {

// After the last work completes, watches for the next for the poll budget before the thread goes
// to sleep: a submitter that issues, waits and issues again then never pays for waking it.
void linger(const Engine& e, std::uint64_t seen) {
  spin_for(poll_budget_ns(), [&] { return e.issued.load(std::memory_order_acquire) != seen; });
}

}  // namespace

void completion_loop(std::shared_ptr<Engine> e) {
  start_engine_thread(*e);
  std::uint64_t completed = 0;
  for (;;) {
    linger(*e, completed);
    CUevent event = nullptr;
    std::uint64_t value = 0;
    bool launched = false;
    detail::PoolVector<detail::Dep> deps;
    {
      std::unique_lock lock(e->mu);
      e->inflight_cv.wait(lock, [&] { return e->stopping || !e->inflight.empty(); });
      // Once stopped, work already on the GPU is still waited for before its buffers are let go.
      if (e->inflight.empty()) break;
      const InFlight& f = e->inflight.front();
      event = f.event;
      value = f.value;
      launched = f.launched;
      deps = f.work.deps;
    }
    Outcome o = wait_event(*e, event);
    if (o && launched) {
      // A kernel that traps can let the event after it report success while the context is
      // already broken; the stream's state says so. Work after it may still run: NOT_READY is fine.
      const CUresult r = e->api.cuStreamQuery.fn(e->stream);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        o = Outcome{r, failure_text(e->api, e->gpu.name, e->api.cuStreamQuery.name, r)};
      }
    }
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
    auto device = e->device.lock();
    InFlight done;
    {
      std::lock_guard lock(e->mu);
      if (o && !e->stopping && device) device->timeline().publish(value);
      done = std::move(e->inflight.front());
      e->inflight.pop_front();
      e->spare_events.push_back(done.event);
    }
    ++completed;
    if (!o) e->lose(o.why);
    // Outside the lock: the work's buffers, or `device` itself, may be the last references.
    done = InFlight{};
    device.reset();
  }
  std::lock_guard lock(e->mu);
  --e->threads_running;
  e->exit_cv.notify_all();
}

}  // namespace rig::backends::cuda
