// The one writer and strict reader of "HOST:PORT": every form written reads back the same, every
// malformed text is refused with the rule it breaks, and socket addresses print in the same form.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "remote/io/address.hpp"

using rig::remote::address_text;
using rig::remote::parse_address;
using rig::remote::PortZero;

namespace {

// The parse of `text`, which must succeed, as "host|port" for one comparison.
std::string parsed(const std::string& text, PortZero zero = PortZero::refused) {
  const auto r = parse_address(text, zero);
  REQUIRE_MESSAGE(r.ok(), text << ": " << (r.ok() ? "" : r.error()));
  return r->host + "|" + std::to_string(r->port);
}

// The error of a parse of `text`, which must fail.
std::string refusal(const std::string& text, PortZero zero = PortZero::refused) {
  const auto r = parse_address(text, zero);
  REQUIRE_MESSAGE(!r.ok(), text << " was accepted");
  return r.error();
}

}  // namespace

TEST_CASE("a name, an IPv4 and an IPv6 address are written and read back the same") {
  struct Case {
    std::string host;
    int port;
    std::string text;
  };
  for (const Case& c :
       {Case{"gpu-node.example.org", 41234, "gpu-node.example.org:41234"},
        Case{"localhost", 1, "localhost:1"}, Case{"127.0.0.1", 65535, "127.0.0.1:65535"},
        Case{"10.0.0.7", 80, "10.0.0.7:80"}, Case{"::1", 4000, "[::1]:4000"},
        Case{"fd00::2", 41234, "[fd00::2]:41234"}, Case{"fe80::1%eth0", 9, "[fe80::1%eth0]:9"}}) {
    CAPTURE(c.text);
    CHECK(address_text(c.host, c.port) == c.text);
    CHECK(parsed(c.text) == c.host + "|" + std::to_string(c.port));
  }
}

TEST_CASE("port 0 is read only where the caller allows it") {
  CHECK(refusal("127.0.0.1:0") == "port '0' is not a number from 1 to 65535");
  CHECK(refusal("[::1]:0") == "port '0' is not a number from 1 to 65535");
  CHECK(parsed("127.0.0.1:0", PortZero::allowed) == "127.0.0.1|0");
  CHECK(parsed("[::1]:0", PortZero::allowed) == "::1|0");
  // Allowing 0 widens nothing else.
  CHECK(refusal("127.0.0.1:65536", PortZero::allowed) ==
        "port '65536' is not a number from 0 to 65535");
  // A listener's forms that once read as port 0, or as every address: an empty port, a sign, a
  // space, an empty host (whose listening line no one could dial).
  CHECK(refusal("127.0.0.1:", PortZero::allowed) == "port '' is not a number from 0 to 65535");
  CHECK(refusal("127.0.0.1:+0", PortZero::allowed) == "port '+0' is not a number from 0 to 65535");
  CHECK(refusal("127.0.0.1: 0", PortZero::allowed) == "port ' 0' is not a number from 0 to 65535");
  CHECK(refusal(":0", PortZero::allowed) == "no address");
  CHECK(refusal(":+0", PortZero::allowed) == "no address");
  CHECK(refusal(": 0", PortZero::allowed) == "no address");
  // Every address of the machine is said as such, and prints in brackets.
  CHECK(parsed("[::]:0", PortZero::allowed) == "::|0");
  CHECK(parsed("0.0.0.0:0", PortZero::allowed) == "0.0.0.0|0");
  CHECK(address_text("::", 46811) == "[::]:46811");
  CHECK(rig::remote::listening_line("::", 46811) == "listening [::]:46811");
}

TEST_CASE("the text a refusal quotes is escaped: it may be a peer's (a JOIN's address)") {
  CHECK(refusal("h\x1b[2J:1") == "address 'h\\x1b[2J' holds a space or control byte");
  CHECK(refusal("host:8\n0") == "port '8\\n0' is not a number from 1 to 65535");
  CHECK(refusal("a\xc2\x9b:b:1") == "an IPv6 address needs brackets, as [a\\xc2\\x9b:b]:PORT");
  const auto unknown = rig::remote::resolve("no\xc2\x9bhost.invalid", 1);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().starts_with("cannot resolve no\\xc2\\x9bhost.invalid: "));
}

TEST_CASE("every malformed address is refused with the rule it breaks") {
  CHECK(refusal("") == "no ':PORT'");
  CHECK(refusal("localhost") == "no ':PORT'");
  CHECK(refusal("::1") == "an IPv6 address needs brackets, as [:]:PORT");
  CHECK(refusal("fd00::2:41234") == "an IPv6 address needs brackets, as [fd00::2]:PORT");
  CHECK(refusal(":80") == "no address");
  CHECK(refusal("[]:80") == "no address");
  CHECK(refusal("my host:80") == "address 'my host' holds a space or control byte");
  CHECK(refusal(" host:80") == "address ' host' holds a space or control byte");
  CHECK(refusal("[::1\n]:80") == "address '::1\\n' holds a space or control byte");
  CHECK(refusal("[::1]80") == "a bracketed address must be followed by ':PORT'");
  CHECK(refusal("[::1]") == "a bracketed address must be followed by ':PORT'");
  CHECK(refusal("[::1:80") == "a bracketed address must be followed by ':PORT'");
  CHECK(refusal("host:") == "port '' is not a number from 1 to 65535");
  CHECK(refusal("host:65536") == "port '65536' is not a number from 1 to 65535");
  CHECK(refusal("host:99999") == "port '99999' is not a number from 1 to 65535");
  CHECK(refusal("host:000080") == "port '000080' is not a number from 1 to 65535");
  CHECK(refusal("host:+80") == "port '+80' is not a number from 1 to 65535");
  CHECK(refusal("host:-80") == "port '-80' is not a number from 1 to 65535");
  CHECK(refusal("host: 80") == "port ' 80' is not a number from 1 to 65535");
  CHECK(refusal("host:80 ") == "port '80 ' is not a number from 1 to 65535");
  CHECK(refusal("host:80x") == "port '80x' is not a number from 1 to 65535");
  CHECK(refusal("host:0x50") == "port '0x50' is not a number from 1 to 65535");
  CHECK(refusal("[::1]:80x") == "port '80x' is not a number from 1 to 65535");
}

TEST_CASE("a socket address prints as its IP and port, IPv6 in brackets") {
  sockaddr_storage v4{};
  auto* in4 = reinterpret_cast<sockaddr_in*>(&v4);
  in4->sin_family = AF_INET;
  in4->sin_port = htons(41234);
  in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(rig::remote::sockaddr_text(v4) == "127.0.0.1:41234");

  sockaddr_storage v6{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&v6);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(7);
  in6->sin6_addr = in6addr_loopback;
  CHECK(rig::remote::sockaddr_text(v6) == "[::1]:7");
  // What it prints, the parser reads back.
  CHECK(parsed(rig::remote::sockaddr_text(v6)) == "::1|7");

  sockaddr_storage other{};
  other.ss_family = AF_UNIX;
  CHECK(rig::remote::sockaddr_text(other) == "?");
}

TEST_CASE("resolve turns a numeric address into its socket address without a lookup") {
  const auto v4 = rig::remote::resolve("127.0.0.1", 9);
  REQUIRE(v4.ok());
  CHECK(rig::remote::sockaddr_text(*v4) == "127.0.0.1:9");
  const auto v6 = rig::remote::resolve("::1", 9);
  REQUIRE(v6.ok());
  CHECK(rig::remote::sockaddr_text(*v6) == "[::1]:9");
  const auto bad = rig::remote::resolve("no such host.invalid", 9);
  REQUIRE(!bad.ok());
  CHECK(bad.error().starts_with("cannot resolve no such host.invalid: "));
}

TEST_CASE("an agent's listening line is written and read through the same rules") {
  CHECK(rig::remote::listening_line("127.0.0.1", 41234) == "listening 127.0.0.1:41234");
  CHECK(rig::remote::listening_line("::1", 41234) == "listening [::1]:41234");
  const auto v6 = rig::remote::parse_listening_line("listening [::1]:41234");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 41234);
  CHECK(rig::remote::parse_listening_line("").error() == "not a line 'listening HOST:PORT'");
  CHECK(rig::remote::parse_listening_line("listening at 127.0.0.1:1").error() ==
        "address 'at 127.0.0.1' holds a space or control byte");
  CHECK(rig::remote::parse_listening_line("Listening 127.0.0.1:1").error() ==
        "not a line 'listening HOST:PORT'");
  // A listener that bound reports its port, never the 0 that asked for one.
  CHECK(rig::remote::parse_listening_line("listening 127.0.0.1:0").error() ==
        "port '0' is not a number from 1 to 65535");
  CHECK(rig::remote::parse_listening_line("listening 127.0.0.1:80 kinds CPU").error() ==
        "port '80 kinds CPU' is not a number from 1 to 65535");
}
