#include "backends/worker.hpp"

#include <pthread.h>

#include <cstring>

#include "rig/kernel.h"

namespace rig::backends {

Worker::Worker(detail::DeviceCore& device, PartHook before_part)
    : state_(std::make_shared<State>()) {
  std::lock_guard lock(state_->mu);
  std::thread t(loop, state_, &device, std::move(before_part));
  state_->thread = t.get_id();
  t.detach();
}

Worker::~Worker() {
  stop();
  std::unique_lock lock(state_->mu);
  if (std::this_thread::get_id() == state_->thread) return;
  state_->cv.wait(lock, [&] { return state_->exited; });
}

void Worker::push(detail::Work work) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;  // the device is lost or closed; its waiters already know
    state_->queue.push_back(std::move(work));
  }
  state_->cv.notify_all();
}

void Worker::stop() noexcept {
  std::deque<detail::Work> dropped;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    dropped.swap(state_->queue);
  }
  state_->cv.notify_all();
  // `dropped` goes out of scope here, outside the lock: it may hold the last reference to
  // another device, whose own teardown must not run under our mutex.
}

bool Worker::settle(std::chrono::steady_clock::time_point until) noexcept {
  std::unique_lock lock(state_->mu);
  if (std::this_thread::get_id() == state_->thread) return false;
  return state_->cv.wait_until(lock, until, [&] { return state_->exited; });
}

void Worker::loop(std::shared_ptr<State> state, detail::DeviceCore* device, PartHook hook) {
  // Host code and each device's work run here: named so that top -H and /proc tell it apart.
  pthread_setname_np(pthread_self(), "rig-worker");
  for (;;) {
    detail::Work work;
    {
      std::unique_lock lock(state->mu);
      state->cv.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
      if (state->stopping) break;
      work = std::move(state->queue.front());
      state->queue.pop_front();
    }
    // `device` is alive here: its destructor waits in ~Worker for this loop to end, unless it
    // runs on this thread, which can only happen below, when `work` lets go of it.
    try {
      for (const detail::Dep& dep : work.deps) dep.device->timeline().wait(dep.value);
      run_host_parts(work, hook);
      device->timeline().publish(work.value);
    } catch (const Lost& e) {
      device->lose(std::string(e.what()));
    } catch (const std::exception& e) {
      device->lose(device->info().name + ": " + e.what());
    }
    work = detail::Work{};  // may drop the last reference to `device`
  }
  std::lock_guard lock(state->mu);
  state->exited = true;
  state->cv.notify_all();
}

void run_host_parts(const detail::Work& work, const Worker::PartHook& before_part) {
  for (const detail::WorkPart& part : work.parts) {
    if (before_part) before_part();
    if (const auto* c = std::get_if<detail::CopyWork>(&part)) {
      if (c->bytes == 0) continue;
      // memmove: a copy within one buffer may overlap.
      std::memmove(c->dst->data() + c->dst_offset, c->src->data() + c->src_offset, c->bytes);
    } else {
      const auto& r = std::get<detail::RunWork>(part);
      rig_launch launch{};
      for (int i = 0; i < 3; ++i) {
        launch.grid[i] = r.shape.grid[i];
        launch.block[i] = r.shape.block[i];
      }
      launch.arg_count = static_cast<std::uint32_t>(r.words.size());
      launch.args = r.words.data();
      reinterpret_cast<rig_entry*>(const_cast<void*>(r.entry))(&launch);
    }
  }
}

}  // namespace rig::backends
