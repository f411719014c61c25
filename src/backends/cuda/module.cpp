// Loading CUDA code: choosing among cubins and PTX, the driver's JIT, and entry lookup.
#include "backends/cuda/module.hpp"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace rig::backends::cuda {
namespace {

// The JIT's error log is kept to this many bytes; enough for the first errors of a bad PTX file.
constexpr std::size_t jit_log_bytes_max = 4096;

// Owner: an ImageCore. Threads: find from any thread (the cache has its own lock). Lifetime: until
// the image and every run that uses it are gone; then the module is unloaded from the context.
class CudaModule final : public detail::Module {
 public:
  CudaModule(const Api& api, const Gpu& gpu, CUmodule module)
      : api_(api), gpu_(gpu), module_(module) {}
  ~CudaModule() override {
    ContextScope scope(api_, gpu_.context);
    api_.cuModuleUnload.fn(module_);
  }
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  // A kernel of the module, by its (unmangled, extern "C") name.
  const void* find(const std::string& entry) const override {
    if (entry.empty()) return nullptr;
    std::lock_guard lock(mu_);
    if (auto it = found_.find(entry); it != found_.end()) return it->second;
    ContextScope scope(api_, gpu_.context);
    CUfunction fn = nullptr;
    if (api_.cuModuleGetFunction.fn(&fn, module_, entry.c_str()) != CUDA_SUCCESS) return nullptr;
    found_.emplace(entry, fn);
    return fn;
  }

 private:
  const Api& api_;
  const Gpu& gpu_;
  const CUmodule module_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, const void*> found_;
};

std::string listing(const Program& program) {
  std::string out;
  for (const Target& t : program.targets()) {
    out += (out.empty() ? "" : ", ") + std::string(format_name(t.format)) + " " + t.arch;
  }
  return out;
}

// Loads one target. The payload is copied: the driver wants an aligned image, and PTX must end
// with a NUL that the file does not store.
Result<CUmodule> load_target(const Api& api, const Gpu& gpu, const Target& t, CUresult* code) {
  std::vector<std::uint64_t> image((t.payload.size() + 1 + 7) / 8, 0);
  std::memcpy(image.data(), t.payload.data(), t.payload.size());
  ContextScope scope(api, gpu.context);
  CUmodule module = nullptr;
  std::string log(jit_log_bytes_max, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log.size()))};
  *code = api.cuModuleLoadDataEx.fn(&module, image.data(), 2, options, values);
  if (*code == CUDA_SUCCESS) return module;
  log.resize(std::strlen(log.c_str()));
  std::string why = "loading the " + std::string(format_name(t.format)) + " " + t.arch +
                    " target failed: cuModuleLoadDataEx: " + describe(api, *code);
  if (!log.empty()) why += "\n" + log;
  return Error(why);
}

}  // namespace

const Target* choose_cuda_target(const Program& program, int sm, bool cubin_allowed) {
  const Target* ptx = nullptr;
  int ptx_sm = 0;
  for (const Target& t : program.targets()) {
    const int t_sm = sm_of(t.arch);
    if (t_sm == 0) continue;
    if (cubin_allowed && t.format == TargetFormat::cuda_cubin && t_sm == sm) return &t;
    if (t.format == TargetFormat::cuda_ptx && t_sm <= sm && t_sm > ptx_sm) {
      ptx = &t;
      ptx_sm = t_sm;
    }
  }
  return ptx;
}

Result<std::unique_ptr<detail::Module>> load_module(const Api& api, const Gpu& gpu,
                                                    const Program& program) {
  const Target* t = choose_cuda_target(program, gpu.sm);
  if (t == nullptr) {
    return Error(
        "rig.program: no CUDA code for " + gpu.arch +
        " (a cubin for exactly that arch, or PTX for it or an older one); the program has " +
        listing(program));
  }
  CUresult code = CUDA_SUCCESS;
  auto m = load_target(api, gpu, *t, &code);
  if (!m && t->format == TargetFormat::cuda_cubin && code == CUDA_ERROR_NO_BINARY_FOR_GPU) {
    if (const Target* ptx = choose_cuda_target(program, gpu.sm, false)) {
      m = load_target(api, gpu, *ptx, &code);
    }
  }
  if (!m) return Error(m.error());
  return std::unique_ptr<detail::Module>(std::make_unique<CudaModule>(api, gpu, *m));
}

}  // namespace rig::backends::cuda
