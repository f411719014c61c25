/* The programs the harness runs on remote machines: the smallest run there is (rig.sim.run), so
 * that what is timed is rig's path (message, apply, launch, completion) and not the kernel, and
 * the host code of the rail scenarios (rig.rail.*). Built as a plain shared object and wrapped
 * into a rig.program by the harness (scenarios.cpp, bench_program). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "rig/kernel.h"

__attribute__((visibility("default"))) const uint32_t rig_kernel_abi = RIG_KERNEL_ABI;

/* No arguments, no effect. */
RIG_ENTRY nop(const rig_launch* l) {
  (void)l;
}

/* args: dst (u8*), bytes, value. Writes every byte, so that a rail's source is real memory (an
 * untouched page would be read as the kernel's one zero page, faster than memory is). */
RIG_ENTRY fill_bytes(const rig_launch* l) {
  memset((void*)(uintptr_t)l->args[0], (int)l->args[2], (size_t)l->args[1]);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The rail ping-pong (rig.rail.pingpong), host code on both machines over two rails: args: out
 * (rig_rail*, this machine its source), in (rig_rail*, this machine its destination), send (u64*,
 * out's source memory), recv (const u64*, in's destination memory), rounds, role (0 starts each
 * round and times it, 1 answers), samples (u64[rounds]: role 0 writes each round's time in ns, go
 * to the answer's arrival; 0: not timed), limit_ns (role 0 starts no round after this long), result
 * (u64[3]: rounds done, answers that were not the round's number, 1 if a count was raised). A
 * round's first word is its number; role 0 ends the exchange with a round carrying 0, which role 1
 * does not answer. */
RIG_ENTRY rail_pingpong_timed(const rig_launch* l) {
  rig_rail* out = (rig_rail*)(uintptr_t)l->args[0];
  rig_rail* in = (rig_rail*)(uintptr_t)l->args[1];
  volatile uint64_t* send = (volatile uint64_t*)(uintptr_t)l->args[2];
  const volatile uint64_t* recv = (const volatile uint64_t*)(uintptr_t)l->args[3];
  const uint64_t rounds = l->args[4];
  const uint64_t role = l->args[5];
  uint64_t* samples = (uint64_t*)(uintptr_t)l->args[6];
  const uint64_t limit_ns = l->args[7];
  uint64_t* result = (uint64_t*)(uintptr_t)l->args[8];
  result[0] = result[1] = result[2] = 0;
  if (role == 0) {
    const uint64_t start = now_ns();
    uint64_t r = 1;
    for (; r <= rounds && now_ns() - start < limit_ns; ++r) {
      /* The last round's source was read once its answer came back. */
      send[0] = r;
      const uint64_t t0 = now_ns();
      if (rig_rail_go(out) != r || rig_rail_wait_arrived(in, r) == RIG_RAIL_RAISED) {
        result[2] = 1;
        return;
      }
      if (samples != 0) samples[r - 1] = now_ns() - t0;
      if (recv[0] != r) ++result[1];
      result[0] = r;
    }
    send[0] = 0;
    if (rig_rail_go(out) != r || rig_rail_wait_sent(out, r) == RIG_RAIL_RAISED) result[2] = 1;
    return;
  }
  for (uint64_t r = 1;; ++r) {
    if (rig_rail_wait_arrived(in, r) == RIG_RAIL_RAISED) {
      result[2] = 1;
      return;
    }
    if (recv[0] == 0) return;
    if (recv[0] != r) ++result[1];
    if (r > 1 && rig_rail_wait_sent(out, r - 1) == RIG_RAIL_RAISED) {
      result[2] = 1;
      return;
    }
    send[0] = recv[0];
    if (rig_rail_go(out) != r) {
      result[2] = 1;
      return;
    }
    result[0] = r;
  }
}
