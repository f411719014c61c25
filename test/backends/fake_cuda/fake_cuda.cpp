// A fake CUDA driver library for machines without a GPU. The CUDA backend loads it through
// RIG_CUDA_LIB exactly as it loads libcuda.so.1 (dlopen, then cuGetProcAddress), so the tests run
// the backend's own code paths: device memory is host memory behind an allocation table with
// GPU-like addresses, each stream is an in-order queue run by a thread of its own, events mark
// points in a stream, and kernels are host functions chosen by name from a small built-in set.
//
// Faults: the kernel "trap" breaks its context as a trapping GPU kernel does (every later call in
// that context returns CUDA_ERROR_LAUNCH_FAILED, 719, except that, as on real hardware, the first
// wait for an event after the trap may still report success). rig_fake_cuda_inject makes the Nth
// call of a named entry point fail with a chosen code; RIG_FAKE_CUDA_INJECT does the same from the
// environment ("cuLaunchKernel:1:719" makes the first launch fail and break the context), for
// tests whose fake runs in another process (a rigd child).
//
// Everything here is test code: it never frees its global state (device threads may run while the
// process exits), and it trusts its caller about as much as the real driver does.
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr int fake_sm = 90;
constexpr std::uint64_t fake_memory_bytes = std::uint64_t{1} << 30;  // per device
constexpr CUdeviceptr fake_address_base = 0x100000000000ull;         // GPU-like addresses
constexpr CUdeviceptr fake_address_stride = 0x10000000000ull;        // per device
constexpr std::size_t fake_alignment_bytes = 256;

struct Ctx {
  int ordinal = 0;
  CUresult sticky = CUDA_SUCCESS;  // a broken context's error
  bool late_report = false;        // the next event wait after a trap still reports success
  std::uint64_t used_bytes = 0;
  CUdeviceptr next_address = 0;
};

struct Stream;

struct Event {
  Stream* stream = nullptr;
  std::uint64_t seq = 0;
  // Made with CU_EVENT_BLOCKING_SYNC: as on a real GPU, reaching it raises an interrupt, counted
  // as the call "interrupt" (rig_fake_cuda_calls), whether or not a thread waits on it.
  bool blocking = false;
  // For the recorder-first mode (State): the thread that last recorded it, and whether that
  // thread has since seen it done.
  std::thread::id recorder;
  bool seen_by_recorder = false;
  // When the recorder last asked about it, or recorded it (State::recorder_quiet_ms).
  std::chrono::steady_clock::time_point recorder_asked{};
};

struct Stream {
  Ctx* ctx = nullptr;
  std::deque<std::function<void()>> ops;
  std::uint64_t queued = 0;  // ops ever queued
  std::uint64_t done = 0;    // ops run (or dropped after the context broke)
};

struct Alloc {
  Ctx* ctx;
  std::size_t bytes;
  std::byte* memory;
};

using Kernel = void (*)(const unsigned grid[3], const unsigned block[3], void** params);

struct Func;
struct Module {
  Ctx* ctx;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Func>> funcs;  // handed out by cuModuleGetFunction, freed with it
};

struct Func {
  Module* module;
  Kernel kernel;
  int params;
  std::string name;
};

struct Injection {
  std::string call;
  int countdown;
  CUresult code;
  bool sticky;
};

// The fake's whole state, under one lock; stream threads wait on `cv`.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Ctx*> ctxs;
  std::map<CUdeviceptr, Alloc> allocs;           // by base address
  std::map<std::uintptr_t, std::size_t> pinned;  // host memory from cuMemHostAlloc
  std::vector<Injection> injections;
  std::unordered_map<std::string, int> calls;
  bool held = false;  // streams run nothing while held
  // Recorder-first: an event reads as not yet reached to every thread but the one that recorded it
  // until that thread has seen it done, so a test can tell which thread noticed the work first
  // (RIG_FAKE_CUDA_RECORDER_FIRST=1, or rig_fake_cuda_recorder_first).
  bool recorder_first = false;
  // With it, a done event the recorder has not asked about (nor recorded) for this long reads as
  // reached to every thread too (0: never): the recorder gave up looking, or never looked, as an
  // agent's loop does on a contended core, and another thread looks in its place. Each such event
  // writes one line "fake cuda: the recorder stopped looking" to stderr, so that a test can count
  // them (RIG_FAKE_CUDA_RECORDER_QUIET_MS).
  int recorder_quiet_ms = 0;
};

State& state() {
  static State* const s = [] {
    auto* st = new State();
    int n = 2;
    if (const char* env = std::getenv("RIG_FAKE_CUDA_DEVICES")) n = std::atoi(env);
    for (int i = 0; i < n; ++i) {
      auto* c = new Ctx();
      c->ordinal = i;
      c->next_address = fake_address_base + static_cast<CUdeviceptr>(i) * fake_address_stride;
      st->ctxs.push_back(c);
    }
    st->recorder_first = std::getenv("RIG_FAKE_CUDA_RECORDER_FIRST") != nullptr;
    if (const char* env = std::getenv("RIG_FAKE_CUDA_RECORDER_QUIET_MS")) {
      st->recorder_quiet_ms = std::atoi(env);
    }
    // "CALL:N:CODE" entries separated by commas.
    if (const char* env = std::getenv("RIG_FAKE_CUDA_INJECT")) {
      std::string spec = env;
      std::size_t start = 0;
      while (start < spec.size()) {
        std::size_t end = spec.find(',', start);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(start, end - start);
        const std::size_t a = item.find(':');
        const std::size_t b = item.find(':', a + 1);
        if (a != std::string::npos && b != std::string::npos) {
          const int code = std::atoi(item.c_str() + b + 1);
          st->injections.push_back(Injection{item.substr(0, a), std::atoi(item.c_str() + a + 1),
                                             static_cast<CUresult>(code), code >= 700});
        }
        start = end + 1;
      }
    }
    return st;
  }();
  return *s;
}

// Each thread's stack of current contexts. A fixed array, not a vector: a thread_local with a
// destructor in a dlopen'ed library races (as TSan sees it) with the loader freeing its storage.
// In the static TLS block (initial-exec, 132 bytes of the loader's surplus for dlopen'ed
// libraries), not in blocks the loader allocates and frees per thread: TSan saw a thread's write
// here race with another thread's exit freeing such a block it had been given again.
constexpr int context_stack_max = 16;
__attribute__((tls_model("initial-exec"))) thread_local Ctx* current[context_stack_max];
__attribute__((tls_model("initial-exec"))) thread_local int current_depth = 0;

Ctx* current_ctx() {
  return current_depth == 0 ? nullptr : current[current_depth - 1];
}

// Counts the call and applies an injection due now. Under the lock.
// Calls made by this thread, for rig_fake_cuda_calls_here.
thread_local std::unordered_map<std::string, int> calls_here;

CUresult enter(State& s, const char* call, Ctx* ctx) {
  ++s.calls[call];
  ++calls_here[call];
  for (auto it = s.injections.begin(); it != s.injections.end(); ++it) {
    if (it->call != call || --it->countdown > 0) continue;
    const Injection inj = *it;
    s.injections.erase(it);
    if (inj.sticky && ctx != nullptr) ctx->sticky = inj.code;
    return inj.code;
  }
  if (ctx != nullptr && ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
  return CUDA_SUCCESS;
}

// The host bytes behind [address, address + bytes) of device or pinned memory; nullptr if the
// range is not inside one allocation.
std::byte* resolve(State& s, CUdeviceptr address, std::size_t bytes) {
  auto it = s.allocs.upper_bound(address);
  if (it != s.allocs.begin()) {
    --it;
    const CUdeviceptr base = it->first;
    if (address - base <= it->second.bytes && bytes <= it->second.bytes - (address - base)) {
      return it->second.memory + (address - base);
    }
  }
  auto p = s.pinned.upper_bound(static_cast<std::uintptr_t>(address));
  if (p != s.pinned.begin()) {
    --p;
    if (address - p->first <= p->second && bytes <= p->second - (address - p->first)) {
      return reinterpret_cast<std::byte*>(address);
    }
  }
  return nullptr;
}

void stream_thread(Stream* st) {
  State& s = state();
  std::unique_lock lock(s.mu);
  for (;;) {
    s.cv.wait(lock, [&] { return !st->ops.empty() && !s.held; });
    auto op = std::move(st->ops.front());
    st->ops.pop_front();
    if (st->ctx->sticky == CUDA_SUCCESS) {
      lock.unlock();
      op();  // ops take the lock themselves where they touch the state
      lock.lock();
    }
    ++st->done;
    s.cv.notify_all();
  }
}

CUresult queue(State& s, Stream* st, std::function<void()> op) {
  st->ops.push_back(std::move(op));
  ++st->queued;
  s.cv.notify_all();
  return CUDA_SUCCESS;
}

// ---- kernels: each reads its parameters as 64-bit words, as rig passes them ----

std::uint64_t word(void** params, int i) {
  std::uint64_t w;
  std::memcpy(&w, params[i], sizeof w);
  return w;
}

std::uint64_t threads_of(const unsigned grid[3], const unsigned block[3]) {
  return std::uint64_t{grid[0]} * grid[1] * grid[2] * block[0] * block[1] * block[2];
}

std::byte* device_bytes(CUdeviceptr p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return resolve(s, p, bytes);
}

// fill_u32(n, value, out): out[i] = value for each thread i < n.
void k_fill_u32(const unsigned grid[3], const unsigned block[3], void** params) {
  const std::uint64_t n = std::min(word(params, 0), threads_of(grid, block));
  const auto v = static_cast<std::uint32_t>(word(params, 1));
  auto* out = reinterpret_cast<std::uint32_t*>(device_bytes(word(params, 2), n * 4));
  if (out == nullptr) return;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = v;
}

// saxpy(n, a, x, y): y[i] = a * x[i] + y[i].
void k_saxpy(const unsigned grid[3], const unsigned block[3], void** params) {
  const std::uint64_t n = std::min(word(params, 0), threads_of(grid, block));
  float a;
  const auto bits = static_cast<std::uint32_t>(word(params, 1));
  std::memcpy(&a, &bits, 4);
  auto* x = reinterpret_cast<const float*>(device_bytes(word(params, 2), n * 4));
  auto* y = reinterpret_cast<float*>(device_bytes(word(params, 3), n * 4));
  if (x == nullptr || y == nullptr) return;
  for (std::uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

// spin_ns(ns): holds the stream that long, so that tests can see work in flight.
void k_spin_ns(const unsigned[3], const unsigned[3], void** params) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(word(params, 0)));
}

void k_trap(const unsigned[3], const unsigned[3], void**) {}

struct KernelInfo {
  Kernel fn;
  int params;
};

const std::map<std::string, KernelInfo>& kernels() {
  static const auto* k = new std::map<std::string, KernelInfo>{{"fill_u32", {k_fill_u32, 3}},
                                                               {"saxpy", {k_saxpy, 4}},
                                                               {"spin_ns", {k_spin_ns, 1}},
                                                               {"trap", {k_trap, 0}}};
  return *k;
}

// ---- the entry points ----

CUresult f_cuInit(unsigned int) {
  if (std::getenv("RIG_FAKE_CUDA_INIT_FAIL") != nullptr) return CUDA_ERROR_NO_DEVICE;
  return CUDA_SUCCESS;
}
CUresult f_cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText error_texts[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};
CUresult f_cuGetErrorName(CUresult code, const char** out) {
  for (const ErrorText& e : error_texts) {
    if (e.code == code) {
      *out = e.name;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult f_cuGetErrorString(CUresult code, const char** out) {
  for (const ErrorText& e : error_texts) {
    if (e.code == code) {
      *out = e.text;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult f_cuDeviceGetCount(int* n) {
  *n = static_cast<int>(state().ctxs.size());
  return *n == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}
CUresult f_cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(state().ctxs.size())) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    *v = fake_sm / 10;
  else if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    *v = fake_sm % 10;
  else
    *v = 0;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "rig fake GPU");
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceTotalMem(std::size_t* bytes, CUdevice) {
  *bytes = fake_memory_bytes;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceCanAccessPeer(int* can, CUdevice, CUdevice) {
  *can = 1;
  return CUDA_SUCCESS;
}
CUresult f_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  *c = reinterpret_cast<CUcontext>(state().ctxs.at(static_cast<std::size_t>(d)));
  return CUDA_SUCCESS;
}
CUresult f_cuCtxSetCurrent(CUcontext c) {
  current_depth = 0;
  if (c != nullptr) current[current_depth++] = reinterpret_cast<Ctx*>(c);
  return CUDA_SUCCESS;
}
CUresult f_cuCtxPushCurrent(CUcontext c) {
  if (current_depth == context_stack_max) return CUDA_ERROR_INVALID_VALUE;
  current[current_depth++] = reinterpret_cast<Ctx*>(c);
  return CUDA_SUCCESS;
}
CUresult f_cuCtxPopCurrent(CUcontext* c) {
  if (current_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --current_depth;
  if (c != nullptr) *c = reinterpret_cast<CUcontext>(current[current_depth]);
  return CUDA_SUCCESS;
}
CUresult f_cuCtxEnablePeerAccess(CUcontext, unsigned int) {
  return CUDA_SUCCESS;
}

CUresult f_cuMemAlloc(CUdeviceptr* p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Ctx* c = current_ctx();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = enter(s, "cuMemAlloc", c); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > fake_memory_bytes - c->used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* memory = static_cast<std::byte*>(std::calloc(bytes, 1));
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = c->next_address;
  c->next_address +=
      (bytes + fake_alignment_bytes - 1) / fake_alignment_bytes * fake_alignment_bytes;
  c->used_bytes += bytes;
  s.allocs.emplace(*p, Alloc{c, bytes, memory});
  return CUDA_SUCCESS;
}
CUresult f_cuMemFree(CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.allocs.find(p);
  if (it == s.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  it->second.ctx->used_bytes -= it->second.bytes;
  std::free(it->second.memory);
  s.allocs.erase(it);
  return enter(s, "cuMemFree", current_ctx());
}
CUresult f_cuMemHostAlloc(void** p, std::size_t bytes, unsigned int) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (CUresult r = enter(s, "cuMemHostAlloc", current_ctx()); r != CUDA_SUCCESS) return r;
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  *p = std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded);
  if (*p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  s.pinned.emplace(reinterpret_cast<std::uintptr_t>(*p), bytes);
  return CUDA_SUCCESS;
}
CUresult f_cuMemFreeHost(void* p) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.pinned.erase(reinterpret_cast<std::uintptr_t>(p)) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult f_cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mu);
  ++s.calls["cuPointerGetAttribute"];
  auto in = s.pinned.upper_bound(static_cast<std::uintptr_t>(p));
  if (in == s.pinned.begin()) return CUDA_ERROR_INVALID_VALUE;
  --in;
  if (p - in->first >= in->second) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = in->first;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<std::size_t*>(data) = in->second;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// A copy on a stream between two resolved ranges; an address outside every allocation fails the
// call at once, as the real driver's checks would.
CUresult copy_async(const char* call, CUstream h, std::byte* dst, const std::byte* src,
                    std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = reinterpret_cast<Stream*>(h);
  if (CUresult r = enter(s, call, st->ctx); r != CUDA_SUCCESS) return r;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return queue(s, st, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}
std::byte* device_range(CUdeviceptr p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return resolve(s, p, bytes);
}
CUresult f_cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream h) {
  return copy_async("cuMemcpyHtoDAsync", h, device_range(dst, bytes),
                    static_cast<const std::byte*>(src), bytes);
}
CUresult f_cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, std::size_t bytes, CUstream h) {
  return copy_async("cuMemcpyDtoHAsync", h, static_cast<std::byte*>(dst), device_range(src, bytes),
                    bytes);
}
CUresult f_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream h) {
  return copy_async("cuMemcpyDtoDAsync", h, device_range(dst, bytes), device_range(src, bytes),
                    bytes);
}
CUresult f_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                             std::size_t bytes, CUstream h) {
  return copy_async("cuMemcpyPeerAsync", h, device_range(dst, bytes), device_range(src, bytes),
                    bytes);
}

CUresult f_cuStreamCreate(CUstream* h, unsigned int) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Ctx* c = current_ctx();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = enter(s, "cuStreamCreate", c); r != CUDA_SUCCESS) return r;
  auto* st = new Stream();
  st->ctx = c;
  std::thread(stream_thread, st).detach();  // streams live as long as the process
  *h = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}
CUresult f_cuStreamDestroy(CUstream) {
  return CUDA_SUCCESS;  // the thread and its queue stay: a fake's streams are few
}
CUresult f_cuStreamQuery(CUstream h) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = reinterpret_cast<Stream*>(h);
  if (CUresult r = enter(s, "cuStreamQuery", st->ctx); r != CUDA_SUCCESS) return r;
  return st->done == st->queued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult f_cuStreamWaitEvent(CUstream h, CUevent e, unsigned int) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = reinterpret_cast<Stream*>(h);
  auto* ev = reinterpret_cast<Event*>(e);
  if (CUresult r = enter(s, "cuStreamWaitEvent", st->ctx); r != CUDA_SUCCESS) return r;
  if (ev->stream == nullptr) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  Stream* other = ev->stream;
  const std::uint64_t seq = ev->seq;
  return queue(s, st, [other, seq] {
    State& s2 = state();
    std::unique_lock l(s2.mu);
    s2.cv.wait(l, [&] { return other->done >= seq; });
  });
}

CUresult f_cuEventCreate(CUevent* e, unsigned int flags) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (CUresult r = enter(s, "cuEventCreate", current_ctx()); r != CUDA_SUCCESS) return r;
  auto* ev = new Event();
  ev->blocking = (flags & CU_EVENT_BLOCKING_SYNC) != 0;
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}
CUresult f_cuEventDestroy(CUevent e) {
  delete reinterpret_cast<Event*>(e);
  return CUDA_SUCCESS;
}
CUresult f_cuEventRecord(CUevent e, CUstream h) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = reinterpret_cast<Stream*>(h);
  if (CUresult r = enter(s, "cuEventRecord", st->ctx); r != CUDA_SUCCESS) return r;
  auto* ev = reinterpret_cast<Event*>(e);
  ev->stream = st;
  ev->seq = st->queued;
  ev->recorder = std::this_thread::get_id();
  ev->seen_by_recorder = false;
  ev->recorder_asked = std::chrono::steady_clock::now();
  if (!ev->blocking) return CUDA_SUCCESS;
  return queue(s, st, [] {
    State& s2 = state();
    std::lock_guard l(s2.mu);
    ++s2.calls["interrupt"];
  });
}
// The outcome of a finished wait on `ev`: success, or the broken context's error, except once
// right after a trap, when the real driver may still say success.
CUresult event_outcome(Event* ev) {
  Ctx* c = ev->stream->ctx;
  if (c->sticky == CUDA_SUCCESS) return CUDA_SUCCESS;
  if (c->late_report) {
    c->late_report = false;
    return CUDA_SUCCESS;
  }
  return c->sticky;
}
CUresult f_cuEventQuery(CUevent e) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  if (ev->stream == nullptr) return CUDA_SUCCESS;
  if (CUresult r = enter(s, "cuEventQuery", nullptr); r != CUDA_SUCCESS) return r;
  const bool by_recorder = ev->recorder == std::this_thread::get_id();
  const auto now = std::chrono::steady_clock::now();
  if (by_recorder) ev->recorder_asked = now;
  if (ev->stream->done < ev->seq) return CUDA_ERROR_NOT_READY;
  if (s.recorder_first && !ev->seen_by_recorder) {
    if (!by_recorder) {
      const bool gave_up =
          s.recorder_quiet_ms > 0 &&
          now - ev->recorder_asked >= std::chrono::milliseconds(s.recorder_quiet_ms);
      if (!gave_up) return CUDA_ERROR_NOT_READY;
      std::fputs("fake cuda: the recorder stopped looking\n", stderr);
    }
    ev->seen_by_recorder = true;
  }
  return event_outcome(ev);
}
CUresult f_cuEventSynchronize(CUevent e) {
  State& s = state();
  std::unique_lock lock(s.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  if (ev->stream == nullptr) return CUDA_SUCCESS;
  if (CUresult r = enter(s, "cuEventSynchronize", nullptr); r != CUDA_SUCCESS) return r;
  s.cv.wait(lock, [&] { return ev->stream->done >= ev->seq; });
  return event_outcome(ev);
}

// A module image is either fake PTX (text naming its kernels with ".entry NAME(") or a fake cubin
// ("FAKECUBIN sm_XY" and then the same), which loads only on a GPU of exactly that arch.
CUresult f_cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned int n, CUjit_option* options,
                              void** values) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Ctx* c = current_ctx();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = enter(s, "cuModuleLoadDataEx", c); r != CUDA_SUCCESS) return r;
  const std::string text(static_cast<const char*>(image));
  auto log = [&](const std::string& line) {
    for (unsigned i = 0; i < n; ++i) {
      if (options[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
      std::size_t size = 0;
      for (unsigned j = 0; j < n; ++j) {
        if (options[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
          size = reinterpret_cast<std::uintptr_t>(values[j]);
        }
      }
      if (size > 0) std::snprintf(static_cast<char*>(values[i]), size, "%s", line.c_str());
    }
  };
  if (text.rfind("FAKECUBIN sm_", 0) == 0) {
    if (std::atoi(text.c_str() + 13) != fake_sm) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  } else if (text.find(".version") == std::string::npos) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto* mod = new Module{c, {}, {}};
  for (std::size_t at = text.find(".entry "); at != std::string::npos;
       at = text.find(".entry ", at + 7)) {
    const std::size_t start = at + 7;
    const std::size_t end = text.find_first_of("( \n", start);
    const std::string name = text.substr(start, end - start);
    if (kernels().count(name) == 0) {
      log("fake ptxas: unknown kernel '" + name + "'");
      delete mod;
      return CUDA_ERROR_INVALID_PTX;
    }
    mod->names.push_back(name);
  }
  *m = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}
CUresult f_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  auto* mod = reinterpret_cast<Module*>(m);
  if (std::find(mod->names.begin(), mod->names.end(), name) == mod->names.end()) {
    return CUDA_ERROR_NOT_FOUND;
  }
  const auto& k = kernels().at(name);
  mod->funcs.push_back(std::make_unique<Func>(Func{mod, k.fn, k.params, name}));
  *f = reinterpret_cast<CUfunction>(mod->funcs.back().get());
  return CUDA_SUCCESS;
}
CUresult f_cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<Module*>(m);
  return CUDA_SUCCESS;
}

CUresult f_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned, CUstream h, void** params, void**) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = reinterpret_cast<Stream*>(h);
  if (CUresult r = enter(s, "cuLaunchKernel", st->ctx); r != CUDA_SUCCESS) return r;
  if (bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  auto* fn = reinterpret_cast<Func*>(f);
  // The real driver copies the parameters at launch; so does the fake (up to 8 words).
  std::vector<std::uint64_t> words;
  if (fn->params > 0 && params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < fn->params; ++i) words.push_back(word(params, i));
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  Kernel k = fn->kernel;
  const bool trap = fn->name == "trap";
  Ctx* c = st->ctx;
  return queue(s, st, [=]() mutable {
    if (trap) {
      State& s2 = state();
      std::lock_guard l(s2.mu);
      c->sticky = CUDA_ERROR_LAUNCH_FAILED;
      c->late_report = true;
      return;
    }
    std::vector<void*> p(words.size());
    for (std::size_t i = 0; i < words.size(); ++i) p[i] = &words[i];
    k(grid, block, p.data());
  });
}

struct Named {
  const char* name;
  void* fn;
};

#define RIG_FAKE(name, version)                                                       \
  Named {                                                                             \
#name, reinterpret_cast < void*>(static_cast <PFN_##name##_v##version>(f_##name)) \
  }

const std::vector<Named>& table() {
  static const auto* t = new std::vector<Named>{
      RIG_FAKE(cuInit, 2000),
      RIG_FAKE(cuDriverGetVersion, 2020),
      RIG_FAKE(cuGetErrorName, 6000),
      RIG_FAKE(cuGetErrorString, 6000),
      RIG_FAKE(cuDeviceGetCount, 2000),
      RIG_FAKE(cuDeviceGet, 2000),
      RIG_FAKE(cuDeviceGetAttribute, 2000),
      RIG_FAKE(cuDeviceGetName, 2000),
      Named{"cuDeviceTotalMem",
            reinterpret_cast<void*>(static_cast<PFN_cuDeviceTotalMem_v3020>(f_cuDeviceTotalMem))},
      RIG_FAKE(cuDeviceCanAccessPeer, 4000),
      RIG_FAKE(cuDevicePrimaryCtxRetain, 7000),
      RIG_FAKE(cuCtxSetCurrent, 4000),
      RIG_FAKE(cuCtxPushCurrent, 4000),
      RIG_FAKE(cuCtxPopCurrent, 4000),
      RIG_FAKE(cuCtxEnablePeerAccess, 4000),
      Named{"cuMemAlloc", reinterpret_cast<void*>(static_cast<PFN_cuMemAlloc_v3020>(f_cuMemAlloc))},
      Named{"cuMemFree", reinterpret_cast<void*>(static_cast<PFN_cuMemFree_v3020>(f_cuMemFree))},
      RIG_FAKE(cuMemHostAlloc, 2020),
      RIG_FAKE(cuMemFreeHost, 2000),
      RIG_FAKE(cuPointerGetAttribute, 4000),
      Named{"cuMemcpyHtoDAsync",
            reinterpret_cast<void*>(static_cast<PFN_cuMemcpyHtoDAsync_v3020>(f_cuMemcpyHtoDAsync))},
      Named{"cuMemcpyDtoHAsync",
            reinterpret_cast<void*>(static_cast<PFN_cuMemcpyDtoHAsync_v3020>(f_cuMemcpyDtoHAsync))},
      Named{"cuMemcpyDtoDAsync",
            reinterpret_cast<void*>(static_cast<PFN_cuMemcpyDtoDAsync_v3020>(f_cuMemcpyDtoDAsync))},
      RIG_FAKE(cuMemcpyPeerAsync, 4000),
      RIG_FAKE(cuStreamCreate, 2000),
      Named{"cuStreamDestroy",
            reinterpret_cast<void*>(static_cast<PFN_cuStreamDestroy_v4000>(f_cuStreamDestroy))},
      RIG_FAKE(cuStreamQuery, 2000),
      RIG_FAKE(cuStreamWaitEvent, 3020),
      RIG_FAKE(cuEventCreate, 2000),
      Named{"cuEventDestroy",
            reinterpret_cast<void*>(static_cast<PFN_cuEventDestroy_v4000>(f_cuEventDestroy))},
      RIG_FAKE(cuEventRecord, 2000),
      RIG_FAKE(cuEventQuery, 2000),
      RIG_FAKE(cuEventSynchronize, 2000),
      RIG_FAKE(cuModuleLoadDataEx, 2010),
      RIG_FAKE(cuModuleGetFunction, 2000),
      RIG_FAKE(cuModuleUnload, 2000),
      RIG_FAKE(cuLaunchKernel, 4000),
  };
  return *t;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** fn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  for (const Named& n : table()) {
    if (std::strcmp(n.name, symbol) == 0) {
      *fn = n.fn;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *fn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// Test controls, found with dlsym on the library the backend loaded.

// The `nth` call of `call` from now fails with `code`; a code of 700 or more breaks the context
// of the call, as sticky errors do.
__attribute__((visibility("default"))) void rig_fake_cuda_inject(const char* call, int nth,
                                                                 int code) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.injections.push_back(Injection{call, nth, static_cast<CUresult>(code), code >= 700});
}

// How many times `call` was made (for the calls the fake counts).
__attribute__((visibility("default"))) int rig_fake_cuda_calls(const char* call) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.calls[call];
}

// How many times `call` was made by the calling thread.
__attribute__((visibility("default"))) int rig_fake_cuda_calls_here(const char* call) {
  return calls_here[call];
}

// Holds every stream (nothing queued runs) or releases them.
__attribute__((visibility("default"))) void rig_fake_cuda_hold(int on) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.held = on != 0;
  s.cv.notify_all();
}

// Recorder-first mode (State::recorder_first) on or off.
__attribute__((visibility("default"))) void rig_fake_cuda_recorder_first(int on) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.recorder_first = on != 0;
}

// Mends every broken context and forgets pending injections, so that one test's device loss does
// not carry into the next.
__attribute__((visibility("default"))) void rig_fake_cuda_reset() {
  State& s = state();
  std::lock_guard lock(s.mu);
  for (Ctx* c : s.ctxs) {
    c->sticky = CUDA_SUCCESS;
    c->late_report = false;
  }
  s.injections.clear();
  s.held = false;
  s.recorder_first = std::getenv("RIG_FAKE_CUDA_RECORDER_FIRST") != nullptr;
  s.cv.notify_all();
}

}  // extern "C"
