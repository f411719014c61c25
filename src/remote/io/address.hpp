// Addresses of a job's processes, written and read one way everywhere: "HOST:PORT", an IPv6 HOST
// in brackets ("[fd00::2]:41234") so that its last group cannot be taken for the port. The agent
// (JOIN's addresses), the launcher variables, rigd's --listen and rig's commands all go through
// here, and so does the line an agent process prints once it listens. Pure, but for resolve().
#pragma once

#include <sys/socket.h>

#include <string>
#include <string_view>

#include "rig/result.hpp"

namespace rig::remote {

struct HostPort {
  std::string host;  // a name or a numeric address, IPv6 without brackets
  int port = 0;
};

// "HOST:PORT", brackets around a HOST that holds a ':'.
std::string address_text(std::string_view host, int port);

// Whether a parse accepts port 0 (a listener's "let the system choose") or only 1 to 65535.
enum class PortZero : bool { refused, allowed };

// Reads "HOST:PORT" or "[IPV6]:PORT" strictly: a non-empty HOST without spaces or control bytes,
// a bare IPv6 HOST refused, PORT all decimal digits in range. Error says which rule `text` breaks;
// the caller says where it was.
Result<HostPort> parse_address(std::string_view text, PortZero zero = PortZero::refused);

// Resolves `host` for a TCP connection: the first address it gives. A numeric address needs no
// lookup; a name blocks the caller for its lookup.
Result<sockaddr_storage> resolve(const std::string& host, int port);

// "IP:PORT" ("[IPV6]:PORT") of a socket address, "?" for a family other than IPv4 and IPv6.
std::string sockaddr_text(const sockaddr_storage& address);

// The first line an agent process (rigd, and the tools that stand in for one) prints on stdout
// once it listens, "listening HOST:PORT", without the newline: launchers, the bench and the tests
// learn the port it bound from it.
std::string listening_line(std::string_view host, int port);
// The address in such a line. Error if `line` is not one: the caller quotes what it read.
Result<HostPort> parse_listening_line(std::string_view line);

}  // namespace rig::remote
