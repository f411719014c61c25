// The RIG_* environment variables that tune how rig waits and what it simulates, read with one
// policy: unset or empty is the tunable's named default; a whole number in decimal from 0 to its
// named maximum is its value; anything else is an error that names the variable and the value
// (std::invalid_argument), never a silent default. Each is declared beside the other limits
// (core/limits.hpp, remote/limits.hpp) and read where it is used, once; rigd reads every one at
// its start, so that a bad value stops it there and not inside a job. Pure, but for getenv.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "rig/result.hpp"

namespace rig::detail {

// One tunable. `default_value` and `max` are in the unit its variable's name ends in; `what`
// says what the value is, for the error ("a count", "a time in microseconds").
struct Tunable {
  const char* name;
  const char* what;
  std::uint64_t default_value;
  std::uint64_t max;
  // Whether the value may also be a range "LOW-HIGH" (LOW <= HIGH, both at most `max`).
  bool range = false;
};

// A tunable's range; a lone number N is the range N-N.
struct TunableRange {
  std::uint64_t low = 0;
  std::uint64_t high = 0;
};

// `text` read as `t`'s value, empty text being its default. Error:
// "rig: NAME='TEXT' is not WHAT from 0 to MAX".
Result<std::uint64_t> parse_tunable(const Tunable& t, std::string_view text);
// The same for a tunable that takes a range; Error adds ", or MIN-MAX of two".
Result<TunableRange> parse_tunable_range(const Tunable& t, std::string_view text);

// The variable's value now, as parse_tunable reads it; std::invalid_argument with its Error.
std::uint64_t read_tunable(const Tunable& t);
TunableRange read_tunable_range(const Tunable& t);

// Reads each of `tunables` (a range where it takes one) and throws for the first bad one.
void check_tunables(std::span<const Tunable> tunables);

}  // namespace rig::detail
