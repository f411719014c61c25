// The one rule for code the loop calls back (libuv callbacks, reactor tickers, a connection's
// reports to its job): nothing unwinds into libuv. Each callback runs its body through guard(),
// which turns an exception into a call of `on_throw` with its text, the job's root cause as the
// spec words it (the exception's what()), instead of std::terminate.
#pragma once

#include <exception>
#include <string>
#include <utility>

namespace rig::remote {

// Runs `body()`. If it throws, runs `on_throw(text)` with the exception's what() ("unknown
// exception" for a throw of something else). `on_throw` must not throw: a second exception while
// the first is handled is a bug of ours, and ends the process.
template <typename Body, typename OnThrow>
void guard(Body&& body, OnThrow&& on_throw) noexcept {
  try {
    std::forward<Body>(body)();
  } catch (const std::exception& e) {
    std::forward<OnThrow>(on_throw)(std::string(e.what()));
  } catch (...) {
    std::forward<OnThrow>(on_throw)(std::string("unknown exception"));
  }
}

}  // namespace rig::remote
