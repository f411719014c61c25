// The one policy for RIG_* tunables: unset or empty is the default, a decimal number up to the
// maximum is the value, and anything else an error naming the variable and the value.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/limits.hpp"
#include "core/tunables.hpp"

using rig::detail::parse_tunable;
using rig::detail::parse_tunable_range;
using rig::detail::Tunable;

namespace {

// A tunable of this test's own, so that no setting of the real ones matters.
constexpr Tunable poll_us{"RIG_TEST_TUNABLE_POLL_US", "a time in microseconds", 200, 1'000'000};
constexpr Tunable latency_us{"RIG_TEST_TUNABLE_LATENCY_US", "a time in microseconds", 0, 10'000,
                             /*range=*/true};
constexpr Tunable seed{"RIG_TEST_TUNABLE_SEED", "a seed", 1, UINT64_MAX};

std::string refusal(const Tunable& t, const std::string& text) {
  const auto r = parse_tunable(t, text);
  REQUIRE_MESSAGE(!r.ok(), text << " was accepted");
  return r.error();
}

// Sets a variable for one scope, and removes it after.
struct Setting {
  const char* name;
  Setting(const char* n, const char* value) : name(n) { REQUIRE(setenv(n, value, 1) == 0); }
  ~Setting() { unsetenv(name); }
};

}  // namespace

TEST_CASE("a tunable's value is a decimal number from 0 to its maximum; empty is its default") {
  CHECK(parse_tunable(poll_us, "").value() == 200);
  CHECK(parse_tunable(poll_us, "0").value() == 0);
  CHECK(parse_tunable(poll_us, "50").value() == 50);
  CHECK(parse_tunable(poll_us, "000050").value() == 50);
  CHECK(parse_tunable(poll_us, "1000000").value() == 1'000'000);
  CHECK(parse_tunable(seed, "18446744073709551615").value() == UINT64_MAX);
}

TEST_CASE("every other value is refused, naming the variable, the value and the rule") {
  const std::string rule = "' is not a time in microseconds from 0 to 1000000";
  for (const char* bad : {"abc", "1000001", "99999999999", "-1", "+5", " 5", "5 ", "5x", "0x10",
                          "1e3", "5.0", "5-6", "\t"}) {
    CAPTURE(bad);
    CHECK(refusal(poll_us, bad) == "rig: RIG_TEST_TUNABLE_POLL_US='" + std::string(bad) + rule);
  }
  // Past 2^64, the number does not wrap around to a small one.
  CHECK(refusal(seed, "18446744073709551616") ==
        "rig: RIG_TEST_TUNABLE_SEED='18446744073709551616' is not a seed from 0 to "
        "18446744073709551615");
  CHECK(refusal(seed, "36893488147419103232") ==
        "rig: RIG_TEST_TUNABLE_SEED='36893488147419103232' is not a seed from 0 to "
        "18446744073709551615");
}

TEST_CASE("a tunable that takes a range reads MIN-MAX or one value, both within its maximum") {
  auto range = [](const std::string& text) {
    const auto r = parse_tunable_range(latency_us, text);
    REQUIRE_MESSAGE(r.ok(), text << ": " << (r.ok() ? "" : r.error()));
    return std::to_string(r->low) + "-" + std::to_string(r->high);
  };
  CHECK(range("") == "0-0");
  CHECK(range("150") == "150-150");
  CHECK(range("0-150") == "0-150");
  CHECK(range("7-7") == "7-7");
  CHECK(range("0-10000") == "0-10000");
  for (const char* bad : {"9-1", "0-10001", "10001", "-5", "5-", "-", "1-2-3", "a-b", "1 - 2"}) {
    CAPTURE(bad);
    const auto r = parse_tunable_range(latency_us, bad);
    REQUIRE(!r.ok());
    CHECK(r.error() == "rig: RIG_TEST_TUNABLE_LATENCY_US='" + std::string(bad) +
                           "' is not a time in microseconds from 0 to 10000, or MIN-MAX of two");
  }
}

TEST_CASE("read_tunable reads the environment: unset and empty are the default, bad raises") {
  unsetenv(poll_us.name);
  CHECK(rig::detail::read_tunable(poll_us) == 200);
  {
    Setting s(poll_us.name, "");
    CHECK(rig::detail::read_tunable(poll_us) == 200);
  }
  {
    Setting s(poll_us.name, "0");
    CHECK(rig::detail::read_tunable(poll_us) == 0);
  }
  {
    Setting s(poll_us.name, "abc");
    CHECK_THROWS_WITH_AS(
        rig::detail::read_tunable(poll_us),
        "rig: RIG_TEST_TUNABLE_POLL_US='abc' is not a time in microseconds from 0 to 1000000",
        std::invalid_argument);
    // The check at a program's start finds it among others.
    const Tunable list[] = {latency_us, poll_us};
    CHECK_THROWS_AS(rig::detail::check_tunables(list), std::invalid_argument);
  }
  {
    Setting s(latency_us.name, "3-4");
    const auto r = rig::detail::read_tunable_range(latency_us);
    CHECK(r.low == 3);
    CHECK(r.high == 4);
    Setting bad(poll_us.name, "5");
    const Tunable list[] = {latency_us, poll_us};
    CHECK_NOTHROW(rig::detail::check_tunables(list));
  }
}

TEST_CASE("the runtime's tunables have defaults within their maxima") {
  for (const Tunable& t : rig::detail::core_tunables) {
    CAPTURE(t.name);
    CHECK(t.default_value <= t.max);
    CHECK(std::string(t.name).starts_with("RIG_"));
  }
  CHECK(rig::detail::sim_devices_tunable.default_value == 2);
  CHECK(rig::detail::cuda_poll_ns_tunable.default_value == 50'000);
}
