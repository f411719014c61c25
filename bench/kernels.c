/* The program rig.sim.run runs: the smallest run there is, so that what is timed is rig's path
 * (message, apply, launch, completion) and not the kernel. Built as a plain shared object and
 * wrapped into a rig.program by the harness (scenarios.cpp, bench_program). */
#include <stdint.h>

#include "rig/kernel.h"

__attribute__((visibility("default"))) const uint32_t rig_kernel_abi = RIG_KERNEL_ABI;

/* No arguments, no effect. */
RIG_ENTRY nop(const rig_launch* l) {
  (void)l;
}
