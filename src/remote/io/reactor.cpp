#include "remote/io/reactor.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/spin.hpp"
#include "remote/limits.hpp"

namespace rig::remote {
namespace {

// Commands run per wake-up of the loop before it turns to its timers and sockets again.
constexpr std::size_t commands_per_turn_max = 256;

// The poll after activity (remote/limits.hpp says why its default); a bad RIG_LOOP_SPIN_US raises
// std::invalid_argument here, from the reactor's constructor, so from a controller's first connect.
std::uint64_t loop_spin_ns() {
  return rig::detail::read_tunable(loop_spin_us_tunable) * 1000;
}

std::uint64_t this_thread_token() noexcept {
  return static_cast<std::uint64_t>(pthread_self());
}

void check_uv(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string("rig: ") + what + ": " + uv_strerror(rc));
}

}  // namespace

Reactor::Reactor(const Clock& clock, std::int64_t tick_ms)
    : clock_(clock), spin_ns_(loop_spin_ns()) {
  check_uv(uv_loop_init(&loop_), "uv_loop_init");
  loop_.data = this;
  check_uv(uv_async_init(&loop_, &async_, on_async), "uv_async_init");
  async_.data = this;
  check_uv(uv_timer_init(&loop_, &tick_), "uv_timer_init");
  tick_.data = this;
  check_uv(uv_timer_init(&loop_, &later_), "uv_timer_init");
  later_.data = this;
  check_uv(uv_idle_init(&loop_, &spin_), "uv_idle_init");
  spin_.data = this;
  check_uv(uv_idle_init(&loop_, &soon_idle_), "uv_idle_init");
  soon_idle_.data = this;
  check_uv(uv_check_init(&loop_, &turn_end_), "uv_check_init");
  turn_end_.data = this;
  check_uv(uv_prepare_init(&loop_, &turn_end_before_poll_), "uv_prepare_init");
  turn_end_before_poll_.data = this;
  check_uv(uv_prepare_init(&loop_, &idle_check_), "uv_prepare_init");
  idle_check_.data = this;
  const auto period = static_cast<std::uint64_t>(std::max<std::int64_t>(tick_ms, 1));
  check_uv(uv_timer_start(&tick_, on_tick, period, period), "uv_timer_start");
}

Reactor::~Reactor() {
  // run() closes the reactor's own handles on its way out; a reactor that never ran closes them
  // here, then lets the loop finish their close callbacks.
  if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async_))) {
    uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&later_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&spin_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&soon_idle_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&idle_check_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&turn_end_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&turn_end_before_poll_), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
  }
  uv_loop_close(&loop_);
}

void Reactor::post(Command* command) noexcept {
  unrun_.fetch_add(1, std::memory_order_acq_rel);
  queue_.push(command);
  // A read-modify-write, as is the loop's clearing in on_spin: if this one comes first, the loop's
  // synchronizes with it and its last look at the queue finds the command; if the loop's comes
  // first, this sees that the loop no longer polls and wakes it.
  if (polling_.fetch_or(0, std::memory_order_acq_rel) == 0) uv_async_send(&async_);
}

void Reactor::run() {
  loop_thread_.store(this_thread_token(), std::memory_order_release);
  uv_run(&loop_, UV_RUN_DEFAULT);
  loop_thread_.store(0, std::memory_order_release);
}

void Reactor::run(const Wait& wait) {
  loop_thread_.store(this_thread_token(), std::memory_order_release);
  while (uv_run(&loop_, UV_RUN_NOWAIT) != 0) {
    const int timeout_ms = uv_backend_timeout(&loop_);
    if (timeout_ms != 0) wait(uv_backend_fd(&loop_), timeout_ms);
  }
  loop_thread_.store(0, std::memory_order_release);
}

void Reactor::stop() noexcept {
  if (stopping_) return;
  stopping_ = true;
  // Every command posted so far runs: each completes exactly once. A push half done now (its
  // poster preempted between its two steps) is waited for: pop() would stop at it, and the command
  // and every one behind it would never run.
  while (QueueNode* node = queue_.pop_pushed()) {
    static_cast<Command*>(node)->run(*this);
    unrun_.fetch_sub(1, std::memory_order_acq_rel);
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&later_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&spin_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&soon_idle_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&idle_check_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&turn_end_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&turn_end_before_poll_), nullptr);
  soon_.clear();
  turn_end_work_.clear();
  idle_work_.clear();
  later_work_.clear();
}

void Reactor::note_activity() noexcept {
  // No poll on a contended core (rig::detail::yield_for_spin): the loop sleeps in epoll, so that
  // its socket's data wakes it and takes the core back.
  if (spin_ns_ == 0 || stopping_) return;
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&spin_))) {
    // The poll's next turn reads the clock anyway and extends it from there: no reading per
    // batch of a pipelined stream.
    active_since_look_ = true;
    return;
  }
  const std::int64_t now = rig::detail::steady_ns();
  if (!rig::detail::spins_allowed(now)) return;
  spin_until_ns_ = now + static_cast<std::int64_t>(spin_ns_);
  polling_.store(1, std::memory_order_relaxed);
  uv_idle_start(&spin_, on_spin);
}

void Reactor::on_spin(uv_idle_t* handle) noexcept {
  auto* r = static_cast<Reactor*>(handle->data);
  // Posters do not wake a polling loop: it looks at the queue itself, every turn.
  if (!r->queue_.empty()) r->drain_commands();
  const std::int64_t now = rig::detail::steady_ns();
  if (r->active_since_look_) {
    r->active_since_look_ = false;
    // Not past a late yield's verdict (yield_for_spin): a contended core ends the poll.
    if (rig::detail::spins_allowed(now)) {
      r->spin_until_ns_ = now + static_cast<std::int64_t>(r->spin_ns_);
    }
  }
  if (now >= r->spin_until_ns_) {
    r->polling_.exchange(0, std::memory_order_acq_rel);
    if (!r->queue_.empty()) {
      // Posted as the polling ended, without a wake-up: poll on.
      r->polling_.store(1, std::memory_order_relaxed);
      return;
    }
    uv_idle_stop(handle);  // the loop sleeps in epoll again from its next turn
    return;
  }
  // What the loop waits for may need this very core (the thread that submits, or the peer's
  // process when both ends share a core): let any such thread run before polling again. With
  // nothing else to run, this returns at once; late, the core is contended: the poll ends at its
  // next turn. But what this turn's end writes (an answer a peer waits for) goes out first: a
  // yield now would let another thread of this core run a slice before it.
  if (!r->turn_end_work_.empty()) return;
  if (!rig::detail::yield_for_spin(now)) r->spin_until_ns_ = 0;
}

void Reactor::soon(std::function<void()> fn) {
  if (stopping_) return;
  soon_.push_back(std::move(fn));
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&soon_idle_))) {
    uv_idle_start(&soon_idle_, on_soon);
  }
}

std::int64_t Reactor::turn_ran_ms() {
  const std::int64_t now = now_ms();
  if (turn_timed_) return now - turn_since_ms_;
  turn_timed_ = true;
  turn_since_ms_ = now;
  at_turn_end([this] { turn_timed_ = false; });
  return 0;
}

void Reactor::at_turn_end(std::function<void()> fn) {
  if (stopping_) return;
  turn_end_work_.push_back(std::move(fn));
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&turn_end_))) {
    uv_check_start(&turn_end_, on_turn_end);
    uv_prepare_start(&turn_end_before_poll_, on_turn_end_before_poll);
  }
}

void Reactor::run_turn_end() {
  std::vector<std::function<void()>> due;
  due.swap(turn_end_work_);
  for (auto& fn : due) fn();
  // What ran may have queued more: it runs at the next of these two points.
  if (turn_end_work_.empty() && !stopping_) {
    uv_check_stop(&turn_end_);
    uv_prepare_stop(&turn_end_before_poll_);
  }
}

void Reactor::on_turn_end(uv_check_t* handle) noexcept {
  static_cast<Reactor*>(handle->data)->run_turn_end();
}

void Reactor::on_turn_end_before_poll(uv_prepare_t* handle) noexcept {
  static_cast<Reactor*>(handle->data)->run_turn_end();
}

void Reactor::when_idle(std::function<void()> fn) {
  if (stopping_) return;
  if (idle_work_.empty()) idle_due_ns_ = uv_hrtime() + idle_work_delay_us * 1000;
  idle_work_.push_back(std::move(fn));
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&idle_check_))) {
    uv_prepare_start(&idle_check_, on_prepare);
  }
}

void Reactor::after_news_delay(std::function<void()> fn) {
  after_ms(later_news_delay_ms, std::move(fn));
}

bool Reactor::run_soon() {
  const bool any = !soon_.empty() || !turn_end_work_.empty() || !idle_work_.empty();
  // What these queue runs on the turn after.
  std::vector<std::function<void()>> due;
  due.swap(soon_);
  for (auto& fn : due) fn();
  run_turn_end();
  run_idle_work();
  return any;
}

void Reactor::run_idle_work() {
  std::vector<std::function<void()>> due;
  due.swap(idle_work_);
  for (auto& fn : due) fn();
}

void Reactor::on_prepare(uv_prepare_t* handle) noexcept {
  // Just before the loop polls: with no handle that keeps it polling, the poll may sleep.
  auto* r = static_cast<Reactor*>(handle->data);
  const bool polls = uv_is_active(reinterpret_cast<uv_handle_t*>(&r->spin_)) ||
                     uv_is_active(reinterpret_cast<uv_handle_t*>(&r->soon_idle_));
  if (polls && uv_hrtime() < r->idle_due_ns_) return;
  r->run_idle_work();
  // What ran may have queued more (when_idle set its time then).
  if (r->idle_work_.empty() && !uv_is_closing(reinterpret_cast<uv_handle_t*>(handle))) {
    uv_prepare_stop(handle);
  }
}

void Reactor::on_soon(uv_idle_t* handle) noexcept {
  auto* r = static_cast<Reactor*>(handle->data);
  r->run_soon();
  if (r->soon_.empty() && !uv_is_closing(reinterpret_cast<uv_handle_t*>(handle))) {
    uv_idle_stop(handle);
  }
}

bool Reactor::on_loop_thread() const noexcept {
  return loop_thread_.load(std::memory_order_acquire) == this_thread_token();
}

std::uint64_t Reactor::add_ticker(Ticker ticker) {
  tickers_.push_back({next_token_, std::move(ticker)});
  return next_token_++;
}

void Reactor::remove_ticker(std::uint64_t token) {
  auto it = std::lower_bound(tickers_.begin(), tickers_.end(), token,
                             [](const Entry& e, std::uint64_t t) { return e.token < t; });
  if (it != tickers_.end() && it->token == token) tickers_.erase(it);
}

void Reactor::tick_now() {
  const std::int64_t now = clock_.now_ms();
  // A ticker may add or remove tickers (a connection that fails closes itself): iterate a copy of
  // the tokens and look each up again. Tokens only grow and removal keeps the order, so the list
  // stays sorted and each look-up is a binary search: a tick over thousands of connections (most
  // of them strangers proving nothing) costs O(n log n), not O(n^2).
  std::vector<std::uint64_t> tokens;
  tokens.reserve(tickers_.size());
  for (const Entry& e : tickers_) tokens.push_back(e.token);
  for (std::uint64_t t : tokens) {
    auto it = std::lower_bound(tickers_.begin(), tickers_.end(), t,
                               [](const Entry& e, std::uint64_t token) { return e.token < token; });
    if (it == tickers_.end() || it->token != t) continue;
    Ticker copy = it->ticker;
    copy(now);
  }
}

void Reactor::drain_commands() {
  // A bounded batch per wake-up: producers that never pause must not starve the loop's timers and
  // sockets. What is left is picked up on the loop's next turn.
  for (std::size_t i = 0; i < commands_per_turn_max; ++i) {
    QueueNode* node = queue_.pop();
    if (node == nullptr) return;
    static_cast<Command*>(node)->run(*this);
    unrun_.fetch_sub(1, std::memory_order_acq_rel);
    if (i == 0) note_activity();
  }
  if (!stopping_) uv_async_send(&async_);
}

void Reactor::on_async(uv_async_t* handle) noexcept {
  static_cast<Reactor*>(handle->data)->drain_commands();
}

void Reactor::after_ms(std::uint64_t ms, std::function<void()> fn) {
  if (stopping_) return;
  later_work_.push_back({uv_now(&loop_) + std::max<std::uint64_t>(ms, 1), std::move(fn)});
  arm_later();
}

void Reactor::arm_later() {
  if (later_work_.empty()) {
    uv_timer_stop(&later_);
    return;
  }
  std::uint64_t due = later_work_.front().due_ms;
  for (const Later& l : later_work_) due = std::min(due, l.due_ms);
  const std::uint64_t now = uv_now(&loop_);
  (void)uv_timer_start(&later_, on_later, due > now ? due - now : 0, 0);
}

void Reactor::on_later(uv_timer_t* handle) noexcept {
  auto* r = static_cast<Reactor*>(handle->data);
  const std::uint64_t now = uv_now(&r->loop_);
  std::vector<Later> due;
  for (auto it = r->later_work_.begin(); it != r->later_work_.end();) {
    if (it->due_ms <= now) {
      due.push_back(std::move(*it));
      it = r->later_work_.erase(it);
    } else {
      ++it;
    }
  }
  for (Later& l : due) {
    if (r->stopping_) return;
    l.fn();
  }
  if (!r->stopping_) r->arm_later();
}

void Reactor::on_tick(uv_timer_t* handle) noexcept {
  static_cast<Reactor*>(handle->data)->tick_now();
}

}  // namespace rig::remote
