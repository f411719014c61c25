/* The example's program: y = a*x + y over n floats. Packed into saxpy.rig by `rig pack` when the
 * project builds. */
#include <stdint.h>
#include <string.h>

#include "rig/kernel.h"

/* args: n, a (a float in the low 32 bits), x (const float*), y (float*). */
RIG_ENTRY saxpy(const rig_launch* l) {
  const uint64_t n = l->args[0];
  const uint32_t a_bits = (uint32_t)l->args[1];
  float a;
  memcpy(&a, &a_bits, sizeof a);
  const float* x = (const float*)(uintptr_t)l->args[2];
  float* y = (float*)(uintptr_t)l->args[3];
  for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
