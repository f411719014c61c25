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
#define RIG_KERNEL_ABI 2

typedef struct rig_launch {
  uint32_t grid[3];     /* blocks in x, y, z */
  uint32_t block[3];    /* threads per block in x, y, z */
  uint32_t arg_count;   /* words in args */
  uint32_t reserved;    /* zero */
  const uint64_t* args; /* each a plain word, a buffer's address on the run's device, or a
                         * rig_rail's address (rig::Arg::rail) */
} rig_launch;

/* A rail (rig/remote.hpp, docs/rails.md) as host code on one of its two machines receives it, for
 * an argument made with rig::Arg::rail: the word is the address of this record, in the agent's
 * memory, valid while the run runs. */
#define RIG_RAIL_RAISED UINT64_MAX /* every count of a failed job's rails */

typedef struct rig_rail rig_rail;
struct rig_rail {
  /* The counts as this machine knows them: rounds whose sources may be written again, rounds whose
   * bytes are all in place. They only grow; read them with rig_rail_sent and rig_rail_arrived.
   * Once the job has failed, both are RIG_RAIL_RAISED. */
  const uint64_t* sent;
  const uint64_t* arrived;
  /* On the source's machine: starts one more round (its bytes are read from the sources from now
   * on, so write them again only once `sent` has reached it) and returns its number. Returns 0 on
   * the destination's machine, and once the job has failed. Any thread; no message to the
   * controller. */
  uint64_t (*go)(rig_rail* rail);
  /* Sleeps until count `which` (0: sent, 1: arrived) reaches `round`, spinning briefly first;
   * returns the count then, RIG_RAIL_RAISED if the job has failed. */
  uint64_t (*wait)(rig_rail* rail, int which, uint64_t round);
  uint32_t is_source; /* 1 on the source's machine, 0 on the destination's */
  uint32_t reserved;  /* zero */
  void* context;      /* rig's */
};

static inline uint64_t rig_rail_sent(const rig_rail* r) {
  return __atomic_load_n(r->sent, __ATOMIC_ACQUIRE);
}
static inline uint64_t rig_rail_arrived(const rig_rail* r) {
  return __atomic_load_n(r->arrived, __ATOMIC_ACQUIRE);
}
static inline uint64_t rig_rail_go(rig_rail* r) {
  return r->go(r);
}
static inline uint64_t rig_rail_wait_sent(rig_rail* r, uint64_t round) {
  return r->wait(r, 0, round);
}
static inline uint64_t rig_rail_wait_arrived(rig_rail* r, uint64_t round) {
  return r->wait(r, 1, round);
}

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
