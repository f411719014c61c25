#include "program/host_module.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/arch.hpp"
#include "program/file.hpp"
#include "rig/kernel.h"

namespace rig::program {
namespace {

// The address of `name` if the object `object` (opened as `handle`) defines it with ELF symbol type
// `type`; nullptr if it is missing, of another type, or found only in a library the object uses.
const void* symbol_of(void* handle, const link_map* object, const char* name, unsigned type) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) return nullptr;
  Dl_info info;
  void* owner = nullptr;
  if (dladdr1(sym, &info, &owner, RTLD_DL_LINKMAP) == 0 || owner != object ||
      info.dli_saddr != sym) {
    return nullptr;
  }
  void* entry = nullptr;
  if (dladdr1(sym, &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr) return nullptr;
  const auto* elf_sym = static_cast<const ElfW(Sym)*>(entry);
  return ELF64_ST_TYPE(elf_sym->st_info) == type ? sym : nullptr;
}

// Owner: an ImageCore. Threads: find from any thread (dlsym and dladdr are thread-safe; the cache
// has its own lock). Lifetime: until the image and every run that uses it are gone; then the
// object is unloaded.
class HostModule final : public detail::Module {
 public:
  HostModule(void* handle, const link_map* object) : handle_(handle), object_(object) {}
  ~HostModule() override { dlclose(handle_); }
  HostModule(const HostModule&) = delete;
  HostModule& operator=(const HostModule&) = delete;

  // Only functions the object itself defines are entries: dlsym on a handle also searches the
  // libraries the object depends on, and running libc's "exit" or a data symbol as an entry would
  // be a crash, not a misuse error.
  const void* find(const std::string& entry) const override {
    if (entry.empty() || entry == RIG_KERNEL_ABI_SYMBOL) return nullptr;
    {
      std::lock_guard lock(mu_);
      if (auto it = found_.find(entry); it != found_.end()) return it->second;
    }
    const void* sym = symbol_of(handle_, object_, entry.c_str(), STT_FUNC);
    if (sym == nullptr) return nullptr;
    // Only hits are kept: a program's entries are few, misspelt names are not.
    std::lock_guard lock(mu_);
    found_.emplace(entry, sym);
    return sym;
  }

 private:
  void* const handle_;
  const link_map* const object_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, const void*> found_;
};

}  // namespace

Result<const Target*> choose_host_target(const Program& program) {
  std::string held;
  for (const std::string& level : detail::host_isa_levels()) {
    for (const Target& t : program.targets()) {
      if (t.format == TargetFormat::host_elf && t.arch == level) return &t;
    }
  }
  for (const Target& t : program.targets()) {
    if (t.format == TargetFormat::host_elf) held += (held.empty() ? "" : ", ") + t.arch;
  }
  std::string runs;
  for (const std::string& level : detail::host_isa_levels()) {
    runs += (runs.empty() ? "" : ", ") + level;
  }
  return Error("rig.program: no host code for this processor (it runs " + runs +
               "; the program has " + (held.empty() ? std::string("no host code") : held) + ")");
}

Result<std::unique_ptr<detail::Module>> load_host(const Program& program) {
  auto chosen = choose_host_target(program);
  if (!chosen) return Error(chosen.error());
  const Target& target = **chosen;

  UniqueFd mem(memfd_create(("rig-program-" + target.arch).c_str(), MFD_CLOEXEC));
  if (mem.get() < 0)
    return Error(std::string("rig.program: memfd_create: ") + std::strerror(errno));
  const std::byte* p = target.payload.data();
  std::size_t left = target.payload.size();
  while (left > 0) {
    const ssize_t w = ::write(mem.get(), p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return Error(std::string("rig.program: writing the memfd: ") + std::strerror(errno));
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(mem.get());
  // RTLD_LOCAL: two programs may export the same entry names without clashing.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return Error("rig.program: loading the " + target.arch +
                 " host code failed: " + (e ? e : "unknown dlopen error"));
  }
  link_map* object = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &object) != 0 || object == nullptr) {
    dlclose(handle);
    return Error("rig.program: the " + target.arch + " host code has no link map after loading");
  }
  auto module = std::make_unique<HostModule>(handle, object);
  const auto* abi = static_cast<const std::uint32_t*>(
      symbol_of(handle, object, RIG_KERNEL_ABI_SYMBOL, STT_OBJECT));
  if (abi == nullptr) {
    return Error("rig.program: the " + target.arch + " host code does not export " +
                 RIG_KERNEL_ABI_SYMBOL + " (was it built with rig pack?)");
  }
  if (*abi != RIG_KERNEL_ABI) {
    return Error("rig.program: the " + target.arch + " host code was built for kernel ABI " +
                 std::to_string(*abi) + ", this rig speaks " + std::to_string(RIG_KERNEL_ABI));
  }
  return std::unique_ptr<detail::Module>(std::move(module));
}

}  // namespace rig::program
