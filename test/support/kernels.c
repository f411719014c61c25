/* Host code the core and backend tests run: small kernels whose effect a test can model exactly.
 * Built as a plain shared object and wrapped into a rig.program by the tests themselves, so the
 * core's tests do not depend on `rig pack`. */
/* nanosleep */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

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

/* args: microseconds. Sleeps that long: work that keeps its device busy for a known time, ended by
 * nothing the test must send (a test then acts while it runs, and again once it has ended). */
RIG_ENTRY nap(const rig_launch* l) {
  const uint64_t us = l->args[0];
  const struct timespec t = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  nanosleep(&t, NULL);
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

/* A pipeline over two rails driven by host code alone (docs/rails.md): args: out (rig_rail*, this
 * machine its source), in (rig_rail*, this machine its destination), send (u64*, out's source
 * memory), recv (const u64*, in's destination memory), rounds, role (0 starts each round, 1
 * answers), result (u64[3]: rounds done, mismatches, 1 if a count was raised). Each round carries
 * one word: the starter sends 2r, the answerer answers with what it got plus one. */
RIG_ENTRY rail_pingpong(const rig_launch* l) {
  rig_rail* out = (rig_rail*)(uintptr_t)l->args[0];
  rig_rail* in = (rig_rail*)(uintptr_t)l->args[1];
  volatile uint64_t* send = (volatile uint64_t*)(uintptr_t)l->args[2];
  const volatile uint64_t* recv = (const volatile uint64_t*)(uintptr_t)l->args[3];
  const uint64_t rounds = l->args[4];
  const uint64_t role = l->args[5];
  uint64_t* result = (uint64_t*)(uintptr_t)l->args[6];
  result[0] = result[1] = result[2] = 0;
  for (uint64_t r = 1; r <= rounds; ++r) {
    if (role == 0) {
      /* The last round's source was read once its answer came back. */
      send[0] = 2 * r;
      if (rig_rail_go(out) != r) {
        result[2] = 1;
        return;
      }
      if (rig_rail_wait_arrived(in, r) == RIG_RAIL_RAISED) {
        result[2] = 1;
        return;
      }
      if (recv[0] != 2 * r + 1) ++result[1];
    } else {
      if (rig_rail_wait_arrived(in, r) == RIG_RAIL_RAISED) {
        result[2] = 1;
        return;
      }
      if (recv[0] != 2 * r) ++result[1];
      if (r > 1 && rig_rail_wait_sent(out, r - 1) == RIG_RAIL_RAISED) {
        result[2] = 1;
        return;
      }
      send[0] = recv[0] + 1;
      if (rig_rail_go(out) != r) {
        result[2] = 1;
        return;
      }
    }
    result[0] = r;
  }
}

/* args: rail (rig_rail*). Waits for the rail's arrived count to reach RIG_RAIL_RAISED, as host
 * code of a surviving agent does once its job has failed, then, after a moment (as host code that
 * cleans up takes: the job process must not exit under it), says so on the agent's stderr (where
 * the test reads it): "rail_wait_raised: arrived N sent M go G". */
RIG_ENTRY rail_wait_raised(const rig_launch* l) {
  rig_rail* r = (rig_rail*)(uintptr_t)l->args[0];
  static const char waiting[] = "rail_wait_raised: waiting\n";
  (void)!write(2, waiting, sizeof waiting - 1);
  const uint64_t arrived = rig_rail_wait_arrived(r, RIG_RAIL_RAISED);
  const uint64_t sent = rig_rail_sent(r);
  const uint64_t go = rig_rail_go(r);
  const struct timespec moment = {0, 200 * 1000 * 1000};
  nanosleep(&moment, NULL);
  char line[128];
  int n = snprintf(line, sizeof line, "rail_wait_raised: arrived %llu sent %llu go %llu\n",
                   (unsigned long long)arrived, (unsigned long long)sent, (unsigned long long)go);
  if (n > 0) (void)!write(2, line, (size_t)n);
}

/* One of rail_go_threads's threads: `calls` rig_rail_go of `rail`, every other one straight after
 * the one before, the rest after a yield of the CPU (so that the loop catches up at times, and
 * host code writes some rounds itself while other threads post theirs). */
struct go_thread {
  rig_rail* rail;
  uint64_t calls;
  uint64_t sum;  /* of the round numbers returned */
  uint64_t zero; /* calls that returned 0 */
};

static void* go_thread_main(void* p) {
  struct go_thread* t = (struct go_thread*)p;
  for (uint64_t i = 0; i < t->calls; ++i) {
    if (i % 2 == 1) sched_yield();
    const uint64_t r = rig_rail_go(t->rail);
    t->sum += r;
    if (r == 0) ++t->zero;
  }
  return NULL;
}

/* args: rail (rig_rail*, this machine its source), calls (per thread), result (u64[2]: the sum of
 * every round number rig_rail_go returned, the calls that returned 0). Four threads start rounds
 * of one rail at once, as fast as they can: rounds host code writes from its own thread, rounds
 * posted to the loop and the loop's sends of them interleave (src/remote/job/rails.hpp,
 * write_round). Every number 1 .. 4 * calls comes back once exactly when their sum is
 * n (n + 1) / 2 and none is 0 (rig_rail_go numbers rounds with one atomic counter). */
RIG_ENTRY rail_go_threads(const rig_launch* l) {
  rig_rail* rail = (rig_rail*)(uintptr_t)l->args[0];
  uint64_t* result = (uint64_t*)(uintptr_t)l->args[2];
  struct go_thread t[4];
  pthread_t id[4];
  int started = 0;
  for (int i = 0; i < 4; ++i) {
    t[i].rail = rail;
    t[i].calls = l->args[1];
    t[i].sum = 0;
    t[i].zero = 0;
    if (pthread_create(&id[i], NULL, go_thread_main, &t[i]) != 0) break;
    ++started;
  }
  result[0] = result[1] = 0;
  for (int i = 0; i < started; ++i) {
    pthread_join(id[i], NULL);
    result[0] += t[i].sum;
    result[1] += t[i].zero;
  }
  if (started != 4) result[1] = UINT64_MAX; /* the test fails: it could not race */
}
