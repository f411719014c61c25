// The engine's shared state: the stream, the events, ordering against other CUDA devices, and
// the wait that polls before it sleeps.
#include "backends/cuda/engine.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/limits.hpp"

namespace rig::backends::cuda {

Engine::Engine(const Api& a, const Gpu& g, std::weak_ptr<detail::DeviceCore> d)
    : api(a), gpu(g), device(std::move(d)) {
  ContextScope scope(api, gpu.context);
  // Non-blocking: the stream never waits for the legacy default stream an application may use.
  if (Outcome o = check(api, gpu.name, api.cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING); !o) {
    setup_error = o.why;
    stream = nullptr;
  }
}

Engine::~Engine() {
  ContextScope scope(api, gpu.context);
  // After a sticky error these calls fail; the context, and all it holds, is gone with the process.
  for (CUevent ev : spare_events) api.cuEventDestroy.fn(ev);
  for (const InFlight& f : inflight) api.cuEventDestroy.fn(f.event);
  for (const Staging::Slot& s : staging.slots) {
    api.cuEventDestroy.fn(s.done);
    api.cuMemFreeHost.fn(s.memory);
  }
  if (stream != nullptr) api.cuStreamDestroy.fn(stream);
}

Outcome Engine::take_event_locked(CUevent* out) {
  if (!spare_events.empty()) {
    *out = spare_events.back();
    spare_events.pop_back();
    return {};
  }
  return check(api, gpu.name, api.cuEventCreate, out, event_flags);
}

Order Engine::order_after(std::uint64_t value, const Engine& waiter, Outcome* failed) {
  std::lock_guard lock(mu);
  // The first work in flight at or past `value` ends after it (the stream is in order). Its event
  // cannot be recycled while we hold the lock.
  for (const InFlight& f : inflight) {
    if (f.value < value) continue;
    *failed = check(waiter.api, waiter.gpu.name, waiter.api.cuStreamWaitEvent, waiter.stream,
                    f.event, 0u);
    return Order::waited;
  }
  // Not in flight: done (the completion thread publishes before it lets an entry go) or not yet
  // issued; the caller tells the two apart by the timeline.
  return Order::not_issued;
}

void Engine::lose(const std::string& why) {
  {
    std::lock_guard lock(mu);
    if (stopping) return;  // closed or already lost: a later symptom is not the cause
  }
  if (auto d = device.lock()) d->lose(why);
}

std::uint64_t poll_budget_ns() {
  static const std::uint64_t ns = detail::read_tunable(detail::cuda_poll_ns_tunable);
  return ns;
}

bool polled(const Engine& e) noexcept {
  return detail::steady_ns() < e.polled_until_ns.load(std::memory_order_acquire);
}

Outcome wait_event(Engine& e, CUevent event, bool* gave_way) {
  CUresult r = CUDA_ERROR_NOT_READY;
  const auto done = [&] {
    if (gave_way != nullptr && polled(e)) return *gave_way = true;
    return (r = e.api.cuEventQuery.fn(event)) != CUDA_ERROR_NOT_READY;
  };
  const std::int64_t since = detail::steady_ns();
  if (!spin_for(poll_budget_ns(), done)) {
    // Long work. A blocking wait would need a blocking-sync event, and an interrupt for every work
    // (event_flags says what that costs): look between sleeps that grow with the wait instead.
    while (!done()) {
      const auto waited = static_cast<std::uint64_t>(detail::steady_ns() - since);
      const std::uint64_t sleep_ns = std::clamp(
          waited / detail::cuda_sleep_share, detail::cuda_sleep_ns_min, detail::cuda_sleep_ns_max);
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    }
  }
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return {};  // done, or the poller's now
  return Outcome{r, failure_text(e.api, e.gpu.name, e.api.cuEventQuery.name, r)};
}

void start_engine_thread(const Engine& e) {
  e.api.cuCtxSetCurrent.fn(e.gpu.context);  // this thread is rig's: it keeps the context
  prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(detail::cuda_timer_slack_ns));
}

}  // namespace rig::backends::cuda
