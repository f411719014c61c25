// The liveness rules' times, with their units. One Timing travels with each job, so a test can
// run the same code with the times scaled down; production uses Timing{} unchanged.
#pragma once

#include <cstdint>

namespace rig::remote {

struct Timing {
  // Each end sends something at least once a second; sending after 800 ms of quiet leaves room for
  // the tick's granularity and a late wake-up.
  std::int64_t heartbeat_idle_ms = 800;
  // No byte from the peer for this long fails the job.
  std::int64_t silence_timeout_ms = 10'000;
  // A send that makes no progress for this long fails the job.
  std::int64_t send_stall_timeout_ms = 10'000;
  // A connection must prove the key, and each step of a job's start must finish, within this.
  std::int64_t handshake_timeout_ms = 10'000;
  // After a failure, how long a connection is drained for the peer's close before it is closed.
  std::int64_t drain_timeout_ms = 10'000;
  // How often the loop checks the deadlines above: the bound on how late any of them fires.
  std::int64_t tick_ms = 100;
  // The kernel's own backstop for unacknowledged data (TCP_USER_TIMEOUT). Both it and the send
  // rule count from the peer's last acknowledgement, so 5 s above the send rule (and its tick)
  // means the kernel never fires first.
  std::int64_t tcp_user_timeout_ms = 15'000;
  // The controller's deadline for the agents' connections to each other runs this much past the
  // agents' own (handshake_timeout_ms from the JOIN each received), so that an agent's cause,
  // which names both machines that did not connect, reaches it first.
  std::int64_t join_verdict_ms = 1'000;

  // Every time divided by `divisor` (at least 1 ms each), for tests of the rules themselves.
  Timing scaled_down(std::int64_t divisor) const {
    auto s = [divisor](std::int64_t ms) { return ms / divisor > 0 ? ms / divisor : 1; };
    return Timing{s(heartbeat_idle_ms),    s(silence_timeout_ms), s(send_stall_timeout_ms),
                  s(handshake_timeout_ms), s(drain_timeout_ms),   s(tick_ms),
                  s(tcp_user_timeout_ms),  s(join_verdict_ms)};
  }
};

}  // namespace rig::remote
