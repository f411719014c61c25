// The CUDA device's detail::Driver: memory, reach, loading, and the hand-off of work to the engine.
#include <algorithm>

#include "backends/cuda/cuda.hpp"
#include "backends/cuda/engine.hpp"
#include "backends/cuda/module.hpp"
#include "backends/host/host.hpp"

namespace rig::backends {
namespace cuda {
namespace {

// Owner: its DeviceCore. Threads: any; enqueue is called under the submission lock (see enqueue).
// Lifetime: the device's; the destructor waits for the engine's threads unless it runs on one of
// them (the last reference to a device can go with the work its completion thread drops).
class CudaDriver final : public detail::Driver {
 public:
  CudaDriver(const Api& api, const Gpu& gpu, std::weak_ptr<detail::DeviceCore> device)
      : e_(std::make_shared<Engine>(api, gpu, std::move(device))) {
    if (!e_->setup_error.empty()) return;
    std::lock_guard lock(e_->mu);
    e_->threads_running = 2;
    std::thread feeder(feed_loop, e_);
    std::thread completion(completion_loop, e_);
    e_->threads = {feeder.get_id(), completion.get_id()};
    feeder.detach();
    completion.detach();
  }

  ~CudaDriver() override {
    stop();
    std::unique_lock lock(e_->mu);
    const auto self = std::this_thread::get_id();
    if (std::find(e_->threads.begin(), e_->threads.end(), self) != e_->threads.end()) return;
    e_->exit_cv.wait(lock, [&] { return e_->threads_running == 0; });
  }

  std::uint64_t allocate(std::size_t bytes) override {
    ContextScope scope(e_->api, e_->gpu.context);
    CUdeviceptr p = 0;
    // A zero-byte buffer still gets an address of its own, as on every other kind.
    if (e_->api.cuMemAlloc.fn(&p, std::max<std::size_t>(bytes, 1)) != CUDA_SUCCESS) return 0;
    return p;
  }

  void release(std::uint64_t address, std::size_t) noexcept override {
    ContextScope scope(e_->api, e_->gpu.context);
    e_->api.cuMemFree.fn(address);  // a lost context refuses; its memory goes with it
  }

  std::byte* host_pointer(std::uint64_t) const noexcept override { return nullptr; }

  bool reaches(const detail::DeviceCore& other) const override {
    if (is_local_host(other)) return true;
    const Engine* o = engine_of(other);
    return o != nullptr && e_->gpu.peer[static_cast<std::size_t>(o->gpu.ordinal)];
  }

  // Called with the submission lock held. Work that needs nothing from the host is issued here, on
  // the submitter's thread, which is then the only one issuing: the feeder is idle (feeding == 0)
  // and only enqueue, under that lock, gives it work. Anything else (a dependency on work not yet
  // on a GPU, pageable memory to stage) goes to the feeder, and so does all later work until it
  // has caught up, so that the stream sees work in submission order. Nothing here waits for
  // another device.
  void enqueue(detail::Work work) override {
    Engine& e = *e_;
    ContextScope scope(e.api, e.gpu.context);
    const bool direct = direct_only(e, work);
    {
      std::lock_guard lock(e.mu);
      if (e.stopping) return;  // lost or closed: its waiters already know
      if (e.feeding != 0 || !direct) return to_feeder_locked(std::move(work));
    }
    try {
      for (const detail::Dep& dep : work.deps) {
        if (dep.device->timeline().reached() >= dep.value) continue;
        Engine* other = engine_of(*dep.device);
        if (other == nullptr) return to_feeder(std::move(work));
        Outcome failed;
        const Order o = other->order_after(dep.value, e, &failed);
        if (!failed) throw DeviceError{failed.why};
        if (o == Order::not_issued) return to_feeder(std::move(work));
      }
      bool launched = false;
      issue_parts(e, work, &launched);
      finish_issue(e, std::move(work), launched);
    } catch (const DeviceError& d) {
      e.lose(d.why);
    }
  }

  void progress() noexcept override { cuda::progress(*e_); }
  void stop_polling() noexcept override { cuda::stop_polling(*e_); }

  Result<std::unique_ptr<detail::Module>> load(const Program& program) override {
    return load_module(e_->api, e_->gpu, program);
  }

  void stop() noexcept override {
    {
      std::lock_guard lock(e_->mu);
      e_->stopping = true;
    }
    e_->feed_cv.notify_all();
    e_->inflight_cv.notify_all();
  }

  Engine& engine() const noexcept { return *e_; }

  static Engine* engine_of(const detail::DeviceCore& d) noexcept {
    const auto* c = dynamic_cast<const CudaDriver*>(&d.driver());
    return c == nullptr ? nullptr : c->e_.get();
  }

 private:
  void to_feeder_locked(detail::Work work) {
    e_->feed.push_back(std::move(work));
    ++e_->feeding;
    e_->feed_cv.notify_one();
  }
  void to_feeder(detail::Work work) {
    std::lock_guard lock(e_->mu);
    if (!e_->stopping) to_feeder_locked(std::move(work));
  }

  const std::shared_ptr<Engine> e_;
};

}  // namespace

Engine* engine_of(const detail::DeviceCore& d) noexcept {
  return CudaDriver::engine_of(d);
}

}  // namespace cuda

Result<std::vector<std::shared_ptr<detail::DeviceCore>>> make_cuda_devices() {
  // Read here, on the caller's thread: a bad RIG_CUDA_POLL_NS raises from rig::open, not inside a
  // device's completion thread.
  (void)cuda::poll_budget_ns();
  const Result<const cuda::Gpus*>& g = cuda::gpus();
  if (!g) return Error(g.error());
  std::vector<std::shared_ptr<detail::DeviceCore>> out;
  for (const cuda::Gpu& gpu : (*g)->list) {
    auto d = std::make_shared<detail::DeviceCore>(
        detail::DeviceInfo{Kind::cuda, gpu.name, gpu.arch, gpu.memory_bytes});
    auto driver = std::make_unique<cuda::CudaDriver>(*(*g)->api, gpu, d);
    const std::string setup_error = driver->engine().setup_error;
    d->attach(std::move(driver));
    if (!setup_error.empty()) d->lose(setup_error);
    out.push_back(std::move(d));
  }
  return out;
}

bool is_cuda(const detail::DeviceCore& d) noexcept {
  return cuda::engine_of(d) != nullptr;
}

}  // namespace rig::backends
