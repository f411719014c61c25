/* The ABI between rig and host code in a rig.program: what an entry point receives. C, so that a
 * packed program can be written in C or C++ and needs nothing of rig's but this header. The
 * format and the rules are in docs/program.md. */
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

/* C linkage for one declaration; RIG_EXTERN_DECL also makes it a declaration only. */
#ifdef __cplusplus
#define RIG_EXTERN_C extern "C"
#define RIG_EXTERN_DECL extern "C"
#else
#define RIG_EXTERN_C
#define RIG_EXTERN_DECL extern
#endif

/* Marks an entry point, so that it is exported with C linkage whatever the compiler's defaults. */
#define RIG_ENTRY RIG_EXTERN_C __attribute__((visibility("default"))) void

/* Every packed host object exports this symbol so that rig can check the ABI it was built for. */
#define RIG_KERNEL_ABI_SYMBOL "rig_kernel_abi"

/* Defines that symbol. `rig pack` adds it to every object it builds; write it once, at file scope,
 * only in host code built some other way. */
#define RIG_DEFINE_KERNEL_ABI                                                           \
  RIG_EXTERN_DECL __attribute__((visibility("default"))) const uint32_t rig_kernel_abi; \
  RIG_EXTERN_C __attribute__((visibility("default"))) const uint32_t rig_kernel_abi = RIG_KERNEL_ABI

/* The float a word carries in its low 32 bits, as rig::Arg::f32 puts it there. */
static inline float rig_arg_f32(uint64_t word) {
  const uint32_t bits = (uint32_t)word;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

#ifdef __cplusplus
}
#endif

#endif
