/* The host code of the rails example (docs/rails.md): a stream of blocks from machine A to machine
 * B over rail `data`, with the rounds started and waited for here, on the agents, and nothing of
 * the controller's per round. B sums each block and sends the sum back over rail `sums` (B to A);
 * that answer is also A's sign that B is done reading the block, so A may start the next one.
 * Packed into rails.rig by `rig pack` when the project builds. */
#include <stdint.h>

#include "rig/kernel.h"

/* Block r's word i: what produce writes and consume expects. */
static uint64_t word_of(uint64_t r, uint64_t i) {
  return r * 1000003u + i;
}

/* On A. args: data (rig_rail*, A its source), sums (rig_rail*, A its destination), block
 * (u64[words], data's source), sum (const u64*, sums' destination), words, rounds, result (u64[2]:
 * rounds done, sums that were wrong). */
RIG_ENTRY produce(const rig_launch* l) {
  rig_rail* data = (rig_rail*)(uintptr_t)l->args[0];
  rig_rail* sums = (rig_rail*)(uintptr_t)l->args[1];
  uint64_t* block = (uint64_t*)(uintptr_t)l->args[2];
  const volatile uint64_t* sum = (const volatile uint64_t*)(uintptr_t)l->args[3];
  const uint64_t words = l->args[4];
  const uint64_t rounds = l->args[5];
  uint64_t* result = (uint64_t*)(uintptr_t)l->args[6];
  result[0] = result[1] = 0;
  for (uint64_t r = 1; r <= rounds; ++r) {
    /* Round r-1's sum has come back (below), so B has read that block: it may be written again. */
    uint64_t want = 0;
    for (uint64_t i = 0; i < words; ++i) {
      block[i] = word_of(r, i);
      want += block[i];
    }
    if (rig_rail_go(data) != r) return; /* 0: the job has failed */
    if (rig_rail_wait_arrived(sums, r) == RIG_RAIL_RAISED) return;
    if (*sum != want) ++result[1];
    result[0] = r;
  }
}

/* On B. args: data (rig_rail*, B its destination), sums (rig_rail*, B its source), block (const
 * u64[words], data's destination), sum (u64*, sums' source), words, rounds, result (u64[2]: rounds
 * done, words that were wrong). */
RIG_ENTRY consume(const rig_launch* l) {
  rig_rail* data = (rig_rail*)(uintptr_t)l->args[0];
  rig_rail* sums = (rig_rail*)(uintptr_t)l->args[1];
  const volatile uint64_t* block = (const volatile uint64_t*)(uintptr_t)l->args[2];
  uint64_t* sum = (uint64_t*)(uintptr_t)l->args[3];
  const uint64_t words = l->args[4];
  const uint64_t rounds = l->args[5];
  uint64_t* result = (uint64_t*)(uintptr_t)l->args[6];
  result[0] = result[1] = 0;
  for (uint64_t r = 1; r <= rounds; ++r) {
    /* Once `arrived` shows round r, its bytes are in place (the count is published after them). */
    if (rig_rail_wait_arrived(data, r) == RIG_RAIL_RAISED) return;
    uint64_t total = 0;
    for (uint64_t i = 0; i < words; ++i) {
      total += block[i];
      result[1] += block[i] != word_of(r, i);
    }
    /* The sum's word is sums' source: round r-1 must have been read before it is written again. */
    if (r > 1 && rig_rail_wait_sent(sums, r - 1) == RIG_RAIL_RAISED) return;
    *sum = total;
    if (rig_rail_go(sums) != r) return;
    result[0] = r;
  }
}
