// The pause a spinning wait makes between two looks at what it waits for.
#pragma once

namespace rig::detail {

// Tells the processor this is a spin loop: it saves power and leaves the core's resources to a
// sibling hyperthread, and costs a few dozen cycles.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace rig::detail
