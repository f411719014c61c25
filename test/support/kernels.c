/* Host code the core and backend tests run: small kernels whose effect a test can model exactly.
 * Built as a plain shared object and wrapped into a rig.program by the tests themselves, so the
 * core's tests do not depend on `rig pack`. */
#include <stdint.h>

#include "rig/kernel.h"

__attribute__((visibility("default"))) const uint32_t rig_kernel_abi = RIG_KERNEL_ABI;

/* args: dst (u32*), src (const u32*), count, k. dst[i] = dst[i] * 3 + src[i] + k. */
RIG_ENTRY mix_u32(const rig_launch* l) {
  uint32_t* dst = (uint32_t*)(uintptr_t)l->args[0];
  const uint32_t* src = (const uint32_t*)(uintptr_t)l->args[1];
  const uint64_t n = l->args[2];
  const uint32_t k = (uint32_t)l->args[3];
  for (uint64_t i = 0; i < n; ++i) dst[i] = dst[i] * 3u + src[i] + k;
}

/* args: dst (u32*), count, value. */
RIG_ENTRY fill_u32(const rig_launch* l) {
  uint32_t* dst = (uint32_t*)(uintptr_t)l->args[0];
  const uint64_t n = l->args[1];
  for (uint64_t i = 0; i < n; ++i) dst[i] = (uint32_t)l->args[2];
}

/* args: flag (u32* in host memory). Spins until *flag is non-zero: keeps a device busy so that a
 * test can act while work is in flight. */
RIG_ENTRY hold(const rig_launch* l) {
  const uint32_t* flag = (const uint32_t*)(uintptr_t)l->args[0];
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) {
  }
}

/* args: out (u32*). Writes the launch shape, so tests can see it arrive intact. */
RIG_ENTRY shape(const rig_launch* l) {
  uint32_t* out = (uint32_t*)(uintptr_t)l->args[0];
  for (int i = 0; i < 3; ++i) {
    out[i] = l->grid[i];
    out[3 + i] = l->block[i];
  }
  out[6] = l->arg_count;
}
