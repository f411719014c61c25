/* Host code for the program tests, packed by the build with `rig pack` (test/program/meson.build).
 * Each entry walks its launch shape as a GPU kernel would its threads: element i belongs to
 * thread i of the flattened grid, so a shape that covers fewer elements leaves the rest alone. */
#include <stdint.h>

#include "rig/kernel.h"

/* Threads in the launch: blocks times threads per block, in all three dimensions. */
static uint64_t threads(const rig_launch* l) {
  uint64_t t = 1;
  for (int i = 0; i < 3; ++i) t *= (uint64_t)l->grid[i] * l->block[i];
  return t;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* args: n, a (f32), x (const float*), y (float*). y[i] = a * x[i] + y[i] for i < n. */
RIG_ENTRY saxpy(const rig_launch* l) {
  if (l->arg_count != 4) return;
  const uint64_t n = min_u64(l->args[0], threads(l));
  const float a = rig_arg_f32(l->args[1]);
  const float* x = (const float*)(uintptr_t)l->args[2];
  float* y = (float*)(uintptr_t)l->args[3];
  for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

/* args: n, value (low 32 bits), out (uint32_t*). out[i] = value + i for i < n. */
RIG_ENTRY fill_u32(const rig_launch* l) {
  if (l->arg_count != 3) return;
  const uint64_t n = min_u64(l->args[0], threads(l));
  const uint32_t value = (uint32_t)l->args[1];
  uint32_t* out = (uint32_t*)(uintptr_t)l->args[2];
  for (uint64_t i = 0; i < n; ++i) out[i] = value + (uint32_t)i;
}

/* args: n, a (const uint32_t*), b (const uint32_t*), out (uint32_t*). out[i] = a[i] + b[i]. */
RIG_ENTRY add_u32(const rig_launch* l) {
  if (l->arg_count != 4) return;
  const uint64_t n = min_u64(l->args[0], threads(l));
  const uint32_t* a = (const uint32_t*)(uintptr_t)l->args[1];
  const uint32_t* b = (const uint32_t*)(uintptr_t)l->args[2];
  uint32_t* out = (uint32_t*)(uintptr_t)l->args[3];
  for (uint64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

/* args: out (uint64_t*), then any words. Writes what the entry received: grid[3], block[3],
 * arg_count, reserved, then every argument word after `out`, so tests see the launch arrive
 * intact. */
RIG_ENTRY describe_launch(const rig_launch* l) {
  if (l->arg_count < 1) return;
  uint64_t* out = (uint64_t*)(uintptr_t)l->args[0];
  for (int i = 0; i < 3; ++i) {
    out[i] = l->grid[i];
    out[3 + i] = l->block[i];
  }
  out[6] = l->arg_count;
  out[7] = l->reserved;
  for (uint32_t i = 1; i < l->arg_count; ++i) out[7 + i] = l->args[i];
}

/* Not an entry: hidden like everything not marked RIG_ENTRY. */
void hidden_helper(const rig_launch* l) {
  (void)l;
}

/* A data symbol the object exports; naming it as an entry is misuse, not a call. */
__attribute__((visibility("default"))) const uint32_t exported_table[4] = {1, 2, 3, 4};
