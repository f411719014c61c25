#include "remote/io/guard.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

using rig::remote::guard;

TEST_SUITE("remote/io/guard") {
  TEST_CASE("a body that returns runs once and calls nothing else") {
    int runs = 0;
    std::vector<std::string> thrown;
    guard([&] { ++runs; }, [&](const std::string& why) { thrown.push_back(why); });
    CHECK(runs == 1);
    CHECK(thrown.empty());
  }

  TEST_CASE("a throw becomes one call with the exception's text, and goes no further") {
    std::vector<std::string> thrown;
    const auto record = [&](const std::string& why) { thrown.push_back(why); };
    guard(
        [] { throw std::runtime_error("cannot start a thread: Resource temporarily unavailable"); },
        record);
    guard([] { throw std::bad_alloc(); }, record);
    guard([] { throw 42; }, record);
    CHECK(thrown ==
          std::vector<std::string>{"cannot start a thread: Resource temporarily unavailable",
                                   std::bad_alloc().what(), "unknown exception"});
  }

  // guard itself is noexcept, so a libuv callback built on it may be too.
  static_assert(noexcept(guard([] {}, [](const std::string&) {})));
}
