// The reactor: one libuv loop on one thread, owning every socket, timer and deadline of the
// process's jobs. Other threads reach it only through post().
#pragma once

#include <uv.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "remote/io/clock.hpp"
#include "remote/io/queue.hpp"

namespace rig::remote {

class Reactor;

// Work for the loop thread. The poster owns the node (a submission's comes from the block pool) and
// learns of its completion however the command says; run() executes on the loop thread, exactly
// once.
struct Command : QueueNode {
  virtual void run(Reactor& reactor) noexcept = 0;

 protected:
  ~Command() = default;
};

// Owner: the controller's runtime (which runs it on a thread of its own) or an agent's serve (which
// runs it on the caller's thread). Threads: post() from any thread, or a signal handler; every
// other member only on the loop thread, once run() has started. Lifetime: the loop is closed in
// the destructor, which requires every handle to have been closed (libuv's rule).
class Reactor {
 public:
  Reactor(const Clock& clock, std::int64_t tick_ms);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // Hands `command` to the loop thread: a wait-free push and uv_async_send, both
  // async-signal-safe; no lock, no allocation. While the loop polls (note_activity) it looks at
  // the queue on every turn, so the wake-up (a write to an eventfd, and the loop's read of it) is
  // left out.
  void post(Command* command) noexcept;
  // Whether every command posted so far has run. Any thread; a post may follow at once.
  bool nothing_posted() const noexcept { return unrun_.load(std::memory_order_acquire) == 0; }

  // Runs the loop on this thread until stop() and until every handle has closed.
  void run();
  // The same, but the loop only polls, and sleeps through `wait(fd, timeout_ms)`: until `fd` (the
  // loop's own, pollable) is readable or timeout_ms pass (-1: no limit), so that the caller
  // chooses what holds while the thread sleeps (an agent's serve opens signals there).
  using Wait = std::function<void(int fd, int timeout_ms)>;
  void run(const Wait& wait);
  // Asks run() to return once the handles still open have closed. Loop thread.
  void stop() noexcept;
  bool stopping() const noexcept { return stopping_; }

  uv_loop_t* loop() noexcept { return &loop_; }
  const Clock& clock() const noexcept { return clock_; }
  std::int64_t now_ms() const noexcept { return clock_.now_ms(); }
  // How long (clock ms) the loop's current turn has run since this was first asked in it (0 then):
  // for work that gives the loop back once a turn has run long (a connection's large reads, which
  // libuv makes up to 32 at a time; Connection::share_turn). Loop thread.
  std::int64_t turn_ran_ms();

  // Called on every tick with the clock's time: where deadlines are checked. Returns a token for
  // remove_ticker. Loop thread.
  using Ticker = std::function<void(std::int64_t now_ms)>;
  std::uint64_t add_ticker(Ticker ticker);
  void remove_ticker(std::uint64_t token);
  // How many tickers are registered (a job that has finished leaves none).
  std::size_t ticker_count() const noexcept { return tickers_.size(); }
  // Runs every ticker now (tests with a ManualClock call this after advancing it).
  void tick_now();

  // Runs `fn` on the loop's next turn, after the sockets ready now have been served: how a
  // writer whose bytes the kernel takes at once lets the loop read its other sockets between two
  // writes. `fn` must not throw (callers guard their bodies). What is queued when the reactor
  // stops is dropped. Loop thread.
  void soon(std::function<void()> fn);
  // Runs `fn` at the end of the loop's current turn: once the callbacks of the sockets and
  // commands it is serving now have run (or before it polls, if queued before its poll). Work
  // queued so during a burst (a read of many frames, a batch of commands) runs once, after it.
  // `fn` must not throw. Dropped if the reactor stops first. Loop thread.
  void at_turn_end(std::function<void()> fn);
  // Runs `fn` once the loop is about to sleep (it has nothing to poll for), and at the latest on
  // its first turn idle_work_delay_us after this call: for work that may wait a little (news no
  // peer is waiting for), so that what a peer does wait for goes first, and several such pieces go
  // together. `fn` must not throw. What is queued when the reactor stops is dropped. Loop thread.
  void when_idle(std::function<void()> fn);
  // Runs `fn` later_news_delay_ms after this call (after_ms), whether or not the loop goes idle
  // first: for news that no peer waits for at all (Connection::send_later). Loop thread.
  void after_news_delay(std::function<void()> fn);
  // Runs what soon(), at_turn_end() and when_idle() queued before this call; whether there was
  // any. The loop
  // does this itself; a test that drives a reactor by hand, with no loop (so always as good as
  // idle), calls it between its steps. Loop thread.
  bool run_soon();
  // Runs `fn` once `ms` (of the loop's clock, 1 ms at least) have passed: for work that must follow
  // within a bound while the loop may sleep throughout (a connection's watch on a socket it has
  // lent to another thread: Connection::lend_reads). `fn` must not throw. Dropped if the reactor
  // stops first. Loop thread.
  void after_ms(std::uint64_t ms, std::function<void()> fn);

  // Whether the caller is on the loop thread.
  bool on_loop_thread() const noexcept;

  // The loop has just done work for a caller (run a command, read a message): an answer or the
  // next request usually follows within microseconds, so for a short while (loop_spin_us) the loop
  // polls its sockets and queue instead of sleeping in the kernel, whose wake-up costs tens of
  // microseconds. Loop thread.
  void note_activity() noexcept;
  // Whether the loop polls now (after activity, see note_activity): it then offers the core to
  // other threads once a turn, once the turn's answers are written (on_spin), so a poll of the
  // loop's own (an agent's watch on a device) need not. Loop thread.
  bool spinning() const noexcept {
    return uv_is_active(reinterpret_cast<const uv_handle_t*>(&spin_)) != 0;
  }

 private:
  static void on_async(uv_async_t* handle) noexcept;
  static void on_tick(uv_timer_t* handle) noexcept;
  static void on_later(uv_timer_t* handle) noexcept;
  void arm_later();
  static void on_spin(uv_idle_t* handle) noexcept;
  static void on_soon(uv_idle_t* handle) noexcept;
  static void on_prepare(uv_prepare_t* handle) noexcept;
  static void on_turn_end(uv_check_t* handle) noexcept;
  static void on_turn_end_before_poll(uv_prepare_t* handle) noexcept;
  void run_turn_end();
  void run_idle_work();
  void drain_commands();

  const Clock& clock_;
  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_timer_t tick_{};
  uv_timer_t later_{};  // active while later_work_ holds work, for its earliest
  struct Later {
    std::uint64_t due_ms;  // uv_now()
    std::function<void()> fn;
  };
  std::vector<Later> later_work_;
  uv_idle_t spin_{};  // active while the loop polls after activity: libuv then polls, never sleeps
  std::uint64_t spin_ns_;           // how long it polls after activity (0: never)
  std::int64_t spin_until_ns_ = 0;  // rig::detail::steady_ns() at which the polling stops
  bool active_since_look_ = false;  // note_activity while polling: on_spin extends the poll
  // 1 while spin_ is active: posters leave out uv_async_send. Cleared before the loop's last
  // look at the queue, so that a post either sees it clear or is found by that look.
  std::atomic<std::uint32_t> polling_{0};
  // Commands posted and not yet run.
  std::atomic<std::size_t> unrun_{0};
  uv_idle_t soon_idle_{};  // active while soon_ holds work: its turn's poll does not sleep
  std::vector<std::function<void()>> soon_;
  uv_check_t turn_end_{};                // active while turn_end_work_ holds work: after the poll
  uv_prepare_t turn_end_before_poll_{};  // and before it, for work queued before the poll
  std::vector<std::function<void()>> turn_end_work_;
  bool turn_timed_ = false;  // turn_ran_ms was asked in this turn, first at turn_since_ms_
  std::int64_t turn_since_ms_ = 0;
  uv_prepare_t idle_check_{};  // active while idle_work_ holds work: before each poll, is it due?
  std::vector<std::function<void()>> idle_work_;
  std::uint64_t idle_due_ns_ = 0;  // uv_hrtime() by which idle_work_'s oldest runs
  MpscQueue queue_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> loop_thread_{0};
  struct Entry {
    std::uint64_t token;
    Ticker ticker;
  };
  std::vector<Entry> tickers_;  // in the order of their tokens
  std::uint64_t next_token_ = 1;
};

}  // namespace rig::remote
