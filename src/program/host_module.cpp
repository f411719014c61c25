#include "program/host_module.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/arch.hpp"
#include "rig/kernel.h"

namespace rig::program {
namespace {

// Owner: an ImageCore. Threads: find from any thread (dlsym is thread-safe). Lifetime: until the
// image and every run that uses it are gone; then the object is unloaded.
class HostModule final : public detail::Module {
 public:
  explicit HostModule(void* handle) : handle_(handle) {}
  ~HostModule() override { dlclose(handle_); }
  HostModule(const HostModule&) = delete;
  HostModule& operator=(const HostModule&) = delete;

  const void* find(const std::string& entry) const override {
    if (entry.empty() || entry == RIG_KERNEL_ABI_SYMBOL) return nullptr;
    return dlsym(handle_, entry.c_str());
  }

 private:
  void* const handle_;
};

// Closes a descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
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

  Fd mem{memfd_create(("rig-program-" + target.arch).c_str(), MFD_CLOEXEC)};
  if (mem.fd < 0) return Error(std::string("rig.program: memfd_create: ") + std::strerror(errno));
  const std::byte* p = target.payload.data();
  std::size_t left = target.payload.size();
  while (left > 0) {
    const ssize_t w = ::write(mem.fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return Error(std::string("rig.program: writing the memfd: ") + std::strerror(errno));
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(mem.fd);
  // RTLD_LOCAL: two programs may export the same entry names without clashing.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return Error("rig.program: loading the " + target.arch +
                 " host code failed: " + (e ? e : "unknown dlopen error"));
  }
  auto module = std::make_unique<HostModule>(handle);
  const auto* abi = static_cast<const std::uint32_t*>(dlsym(handle, RIG_KERNEL_ABI_SYMBOL));
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
