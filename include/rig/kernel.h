/* The ABI between rig and host code in a rig.program: what an entry point receives. C, so that a
 * packed program can be written in C or C++ and needs nothing of rig's but this header. */
#ifndef RIG_KERNEL_H
#define RIG_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when the layout below changes; rig refuses code packed against another version. */
#define RIG_KERNEL_ABI 1

typedef struct rig_launch {
  uint32_t grid[3];     /* blocks in x, y, z */
  uint32_t block[3];    /* threads per block in x, y, z */
  uint32_t arg_count;   /* words in args */
  uint32_t reserved;    /* zero */
  const uint64_t* args; /* each a plain word or a buffer's address on the run's device */
} rig_launch;

/* Every entry point has this type. It runs once per launch and walks the shape itself. */
typedef void rig_entry(const rig_launch* launch);

/* Marks an entry point, so that it is exported with C linkage whatever the compiler's defaults. */
#ifdef __cplusplus
#define RIG_ENTRY extern "C" __attribute__((visibility("default"))) void
#else
#define RIG_ENTRY __attribute__((visibility("default"))) void
#endif

/* Every packed host object exports this symbol so that rig can check the ABI it was built for. */
#define RIG_KERNEL_ABI_SYMBOL "rig_kernel_abi"

#ifdef __cplusplus
}
#endif

#endif
