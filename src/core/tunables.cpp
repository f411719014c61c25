#include "core/tunables.hpp"

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace rig::detail {
namespace {

// Decimal digits only, no sign, no space, no overflow past `max`.
bool read_number(std::string_view text, std::uint64_t max, std::uint64_t& out) {
  if (text.empty()) return false;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
    value = value * 10 + digit;
  }
  if (value > max) return false;
  out = value;
  return true;
}

Error refusal(const Tunable& t, std::string_view text) {
  std::string why = "rig: " + std::string(t.name) + "='" + std::string(text) + "' is not " +
                    t.what + " from 0 to " + std::to_string(t.max);
  if (t.range) why += ", or MIN-MAX of two";
  return Error(std::move(why));
}

std::string_view value_of(const Tunable& t) {
  const char* v = std::getenv(t.name);
  return v == nullptr ? std::string_view() : std::string_view(v);
}

}  // namespace

Result<std::uint64_t> parse_tunable(const Tunable& t, std::string_view text) {
  if (text.empty()) return t.default_value;
  std::uint64_t value = 0;
  if (!read_number(text, t.max, value)) return refusal(t, text);
  return value;
}

Result<TunableRange> parse_tunable_range(const Tunable& t, std::string_view text) {
  if (text.empty()) return TunableRange{t.default_value, t.default_value};
  const std::size_t dash = text.find('-');
  TunableRange r;
  if (dash == std::string_view::npos) {
    if (!read_number(text, t.max, r.low)) return refusal(t, text);
    r.high = r.low;
    return r;
  }
  if (!read_number(text.substr(0, dash), t.max, r.low) ||
      !read_number(text.substr(dash + 1), t.max, r.high) || r.high < r.low) {
    return refusal(t, text);
  }
  return r;
}

std::uint64_t read_tunable(const Tunable& t) {
  auto r = parse_tunable(t, value_of(t));
  if (!r) throw std::invalid_argument(r.error());
  return *r;
}

TunableRange read_tunable_range(const Tunable& t) {
  auto r = parse_tunable_range(t, value_of(t));
  if (!r) throw std::invalid_argument(r.error());
  return *r;
}

void check_tunables(std::span<const Tunable> tunables) {
  for (const Tunable& t : tunables) {
    if (t.range) {
      (void)read_tunable_range(t);
    } else {
      (void)read_tunable(t);
    }
  }
}

}  // namespace rig::detail
