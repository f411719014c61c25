// The feeder: issues the work the submitting thread could not, after waiting on the host for what
// it depends on, and runs the host steps of staged copies.
#include <pthread.h>

#include "backends/cuda/engine.hpp"

namespace rig::backends::cuda {
namespace {

// Waits until the work `work` follows is done, or ordered on the GPU where that suffices: a
// dependency on another CUDA device's issued work becomes a stream wait, unless this work has
// host steps, which must see that work's effects on host memory before they start.
void order(Engine& e, const detail::Work& work, bool host_steps) {
  for (const detail::Dep& dep : work.deps) {
    if (dep.device->timeline().reached() >= dep.value) continue;
    if (!host_steps) {
      if (Engine* other = engine_of(*dep.device)) {
        Outcome failed;
        if (other->order_after(dep.value, e, &failed) == Order::waited) {
          if (!failed) throw DeviceError{failed.why};
          continue;
        }
      }
    }
    dep.device->timeline().wait(dep.value);  // raises Lost with the other device's cause
  }
}

}  // namespace

void feed_loop(std::shared_ptr<Engine> e) {
  pthread_setname_np(pthread_self(), "rig-cuda-feed");
  start_engine_thread(*e);
  std::deque<detail::Work> dropped;
  for (;;) {
    detail::Work work;
    {
      std::unique_lock lock(e->mu);
      e->feed_cv.wait(lock, [&] { return e->stopping || !e->feed.empty(); });
      if (e->stopping) {
        e->feeding -= e->feed.size();
        dropped.swap(e->feed);
        break;
      }
      work = std::move(e->feed.front());
      e->feed.pop_front();
    }
    try {
      order(*e, work, !direct_only(*e, work));
      bool launched = false;
      issue_parts(*e, work, &launched);
      finish_issue(*e, std::move(work), launched);
    } catch (const DeviceError& d) {
      e->lose(d.why);
    } catch (const Lost& l) {
      e->lose(l.what());
    } catch (const std::exception& x) {
      e->lose(e->gpu.name + ": " + x.what());
    }
    work = detail::Work{};  // may hold the last reference to another device: not under our lock
    std::lock_guard lock(e->mu);
    --e->feeding;
  }
  // Dropped outside the lock: the work may hold the last reference to a device.
  dropped.clear();
  std::lock_guard lock(e->mu);
  --e->threads_running;
  e->exit_cv.notify_all();
}

}  // namespace rig::backends::cuda
