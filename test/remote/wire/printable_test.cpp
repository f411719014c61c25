#include "remote/wire/printable.hpp"

#include <doctest/doctest.h>

#include <string>

using rig::remote::printable;

TEST_CASE("printable keeps printable ASCII as it is") {
  CHECK(printable("") == "");
  CHECK(printable("h100-b=10.0.0.2:41234 [fd00::2]:7 ~!@#$%^&*()") ==
        "h100-b=10.0.0.2:41234 [fd00::2]:7 ~!@#$%^&*()");
}

TEST_CASE("printable escapes what could forge a line or drive a terminal") {
  // A name that would forge a whole log line of rigd's.
  CHECK(printable("x\nrigd[1]: job 999: closed") == "x\\nrigd[1]: job 999: closed");
  CHECK(printable("a\rb\tc") == "a\\rb\\tc");
  CHECK(printable("\x1b[2J") == "\\x1b[2J");
  CHECK(printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
  CHECK(printable("\x7f") == "\\x7f");
  // A C1 control in UTF-8 (U+009B, CSI) and any other byte above ASCII.
  CHECK(printable("\xc2\x9b") == "\\xc2\\x9b");
  CHECK(printable("\xff") == "\\xff");
  // A backslash is escaped too, so that an escape in the output always came from an escape.
  CHECK(printable("\\x41") == "\\\\x41");
}

TEST_CASE("printable_once keeps printable ASCII, escapes whole any text that is not") {
  using rig::remote::printable_once;
  // A cause its sender escaped already: kept as it is, backslashes and all.
  CHECK(printable_once("controller aborted: x\\nrigd") == "controller aborted: x\\nrigd");
  CHECK(printable_once("") == "");
  // A peer that sent raw bytes: every byte escaped, its backslashes too, as printable does.
  CHECK(printable_once("a\\b\nc") == "a\\\\b\\nc");
  CHECK(printable_once("\x1b[2J") == "\\x1b[2J");
  // Escaping twice changes nothing more.
  const std::string once = printable_once("x\nrigd[1]: job 999: closed\x1b[2J");
  CHECK(printable_once(once) == once);
}
