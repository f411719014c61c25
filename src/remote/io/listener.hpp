// An agent's listening socket on the loop: accepts connections and hands each socket on. We accept
// ourselves rather than through uv_listen because libuv, out of descriptors, accepts and closes
// every waiting connection (its "EMFILE trick"), and on ENOBUFS or ENOMEM calls back in a tight
// loop; the agent must instead leave the connection waiting and accept again a moment later.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

namespace rig::remote {

// After an accept that failed for lack of descriptors, buffers or memory, and with nothing the
// agent could let go of to make room, the listener waits this long before it accepts again:
// within the second the agent promises, and long enough that a process out of descriptors spends
// next to nothing on the retries. The kernel keeps the connection waiting in the backlog meanwhile
// (Linux; macOS would close it).
inline constexpr std::uint64_t accept_retry_ms = 500;
// Connections accepted per wake-up before the loop turns to its other sockets and timers.
inline constexpr int accepts_per_turn_max = 64;

// What an errno from accept(2) means for a listener.
enum class AcceptError : std::uint8_t {
  wait,         // nothing waiting now (EAGAIN), or a signal interrupted the call: poll again
  next,         // the connection it took failed (ECONNABORTED, a network error): accept the next
  retry_later,  // no descriptor, buffer or memory: accept again after accept_retry_ms
  fatal,        // anything else: the listener cannot go on
};
AcceptError classify_accept_error(int err) noexcept;

// Owner: the agent's job (AgentProtocol), which outlives the loop's run. Threads: the loop thread
// only. Lifetime: from construction to stop(); the handles' memory must stay until the loop has run
// their close callbacks, which serve's loop does before it returns. Owns the listening descriptor
// from construction and closes it in stop().
class Listener {
 public:
  struct Events {
    // A connected, non-blocking socket, which now belongs to the callee.
    std::function<void(int fd)> accepted;
    // Accepting failed for lack of resources (the errno): the callee may close a connection it
    // holds (the agent's oldest stranger) and return true, and the listener accepts again at
    // once; false, and it is tried again after accept_retry_ms. Called on every such failure, so
    // it must make room at once or answer false. May be empty (never any room).
    std::function<bool(int err)> make_room;
    // Accepting failed for lack of resources and make_room had nothing to give (the errno); it is
    // tried again after accept_retry_ms. Called once when a shortage begins, not on each retry.
    std::function<void(int err)> short_of_resources;
    // Accepting cannot go on (strerror's text, or the text of an exception that an `accepted`
    // callback raised); the listener has stopped.
    std::function<void(const std::string& why)> failed;
  };

  Listener(uv_loop_t* loop, int fd, Events events);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Starts watching the socket; 0, or a libuv error code (the listener is then stopped).
  int start();
  // Stops accepting and closes the socket; idempotent.
  void stop();

 private:
  static void on_readable(uv_poll_t* handle, int status, int events) noexcept;
  static void on_retry(uv_timer_t* handle) noexcept;
  void threw(const std::string& why) noexcept;
  void accept_some();
  // Whether a connection waits in the backlog (the socket polls readable).
  bool connection_waiting() const;

  uv_loop_t* loop_;
  int fd_;
  Events events_;
  uv_poll_t poll_{};
  uv_timer_t retry_{};
  bool poll_open_ = false;
  bool timer_open_ = false;
  bool short_ = false;  // in a shortage of resources: the retry timer, not the poll, is running
};

}  // namespace rig::remote
