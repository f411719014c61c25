// The liveness rules of one connection, as a pure function of its timestamps and the clock: when
// to send a heartbeat, and when the peer is silent or the send path stuck. No sockets, no timers,
// so a test can check every bound on a ManualClock.
#pragma once

#include <cstdint>
#include <limits>

#include "remote/io/timing.hpp"

namespace rig::remote {

// A tick at least this long after the one before it means that this process did not run
// meanwhile (SIGSTOP, a suspended machine): what the peer sent then may wait unread, and the loop
// runs its timers before its reads. Ten of the loop's 100 ms ticks, and not scaled with a job's
// times: a process's loop ticks as its first job's times had it, so only an absolute bound is
// safe. A late tick of a loaded machine merely postpones the verdicts by one tick.
inline constexpr std::int64_t paused_ms_min = 1'000;

// Owner: a connection. Threads: the loop thread. Lifetime: the connection's.
class Liveness {
 public:
  Liveness(const Timing& timing, std::int64_t now_ms)
      : timing_(timing), last_received_ms_(now_ms), last_sent_ms_(now_ms), last_tick_ms_(now_ms) {}

  // Some bytes arrived from the peer.
  void received(std::int64_t now_ms) noexcept { last_received_ms_ = now_ms; }
  // A message was handed to the socket (a heartbeat counts).
  void sent(std::int64_t now_ms) noexcept { last_sent_ms_ = now_ms; }
  // Bytes are waiting to be sent: the stall clock runs from the first such moment, and restarts at
  // every write that makes progress.
  void backlog(std::int64_t now_ms) noexcept {
    if (!backlogged_) {
      backlogged_ = true;
      last_progress_ms_ = now_ms;
    }
  }
  void progress(std::int64_t now_ms, bool backlog_left) noexcept {
    last_progress_ms_ = now_ms;
    backlogged_ = backlog_left;
  }
  // Nothing waits to be sent any more.
  void settled() noexcept { backlogged_ = false; }

  // The loop's tick, at every one whatever the connection's state: a tick long after the one
  // before marks a pause of this process.
  void ticked(std::int64_t now_ms) noexcept {
    // Only one tick in a row is spared: a loop late at every tick still judges every other one.
    const bool late = now_ms - last_tick_ms_ >= paused_ms_min;
    if (late && resumed_ms_ != last_tick_ms_) {
      paused_ms_ = now_ms - last_tick_ms_;
      resumed_ms_ = now_ms;
    }
    last_tick_ms_ = now_ms;
  }
  // Whether `now_ms` is the tick that ended a pause: what came meanwhile is still to be read, so
  // no deadline that counts the peer's bytes is judged on it.
  bool resuming(std::int64_t now_ms) const noexcept { return now_ms == resumed_ms_; }
  // How long this process was last paused, if it resumed after `since_ms`; else 0.
  std::int64_t paused_since(std::int64_t since_ms) const noexcept {
    return resumed_ms_ > since_ms ? paused_ms_ : 0;
  }

  enum class Verdict { fine, send_heartbeat, silent, stalled };

  Verdict check(std::int64_t now_ms) const noexcept {
    // Just resumed: the peer's bytes of the pause (its abort, likely) are read before any verdict,
    // which the next tick gives.
    const bool paused = resuming(now_ms);
    if (!paused && backlogged_ && now_ms - last_progress_ms_ >= timing_.send_stall_timeout_ms) {
      return Verdict::stalled;
    }
    if (!paused && now_ms - last_received_ms_ >= timing_.silence_timeout_ms) {
      return Verdict::silent;
    }
    if (!backlogged_ && now_ms - last_sent_ms_ >= timing_.heartbeat_idle_ms) {
      return Verdict::send_heartbeat;
    }
    return Verdict::fine;
  }

  std::int64_t last_received_ms() const noexcept { return last_received_ms_; }

 private:
  Timing timing_;
  std::int64_t last_received_ms_;
  std::int64_t last_sent_ms_;
  std::int64_t last_progress_ms_ = 0;
  bool backlogged_ = false;
  std::int64_t last_tick_ms_;
  std::int64_t paused_ms_ = 0;
  std::int64_t resumed_ms_ = std::numeric_limits<std::int64_t>::min();
};

}  // namespace rig::remote
