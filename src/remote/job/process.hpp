// What one process holds for every job it takes part in, whichever its role: its instance id, the
// break a Ctrl-C requests, and the times the next job runs by.
#pragma once

#include "remote/io/timing.hpp"
#include "remote/trust/handshake.hpp"

namespace rig::remote {

// This process's instance id, drawn once (a fork's child draws its own). Loop threads.
const InstanceId& process_instance();

// Whether request_break() (public, async-signal-safe) was called since the last clear. Any thread.
bool break_requested() noexcept;
void clear_break() noexcept;

// Times for the next job this process starts or serves. Tests of the liveness rules scale them
// down; nothing else changes them. Any thread.
void set_job_timing(const Timing& timing);
Timing job_timing();

}  // namespace rig::remote
