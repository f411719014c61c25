// rig::Result<T>: a value or the reason there is none. Used where an operation's failure is an
// expected outcome the caller must handle (a bad file, a job that does not start); misuse raises
// std::invalid_argument instead. C++20 has no std::expected, so this is the small subset we need.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace rig {

// The reason carried by a failed Result. Explicit so that a bare string never becomes an error by
// accident.
struct Error {
  std::string why;
  explicit Error(std::string w) : why(std::move(w)) {}
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  // The value; std::logic_error when there is none, since that is a bug in the caller.
  T& value() & { return check(), std::get<0>(v_); }
  const T& value() const& { return check(), std::get<0>(v_); }
  T&& value() && { return check(), std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // The reason; std::logic_error when the result holds a value.
  const std::string& error() const {
    if (ok()) throw std::logic_error("rig::Result::error() on a value");
    return std::get<1>(v_).why;
  }

 private:
  void check() const {
    if (!ok()) throw std::logic_error("rig::Result::value() on an error: " + std::get<1>(v_).why);
  }
  std::variant<T, Error> v_;
};

// For operations that succeed with nothing to return.
struct Unit {};

}  // namespace rig
