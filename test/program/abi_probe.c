/* Host code that rig pack did not build, for the loader's ABI checks: without PROBE_ABI it exports
 * no rig_kernel_abi at all; with it, it claims kernel ABI PROBE_ABI. */
#include <stdint.h>

#include "rig/kernel.h"

#ifdef PROBE_ABI
__attribute__((visibility("default"))) const uint32_t rig_kernel_abi = PROBE_ABI;
#endif

RIG_ENTRY probe(const rig_launch* l) {
  (void)l;
}
