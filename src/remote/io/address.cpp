#include "remote/io/address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "remote/wire/printable.hpp"

namespace rig::remote {
namespace {

constexpr std::string_view listening_prefix = "listening ";

}  // namespace

std::string address_text(std::string_view host, int port) {
  std::string out;
  const bool v6 = host.find(':') != std::string_view::npos;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

Result<HostPort> parse_address(std::string_view text, PortZero zero) {
  const auto bad = [](const std::string& why) { return Error(why); };
  HostPort out;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("a bracketed address must be followed by ':PORT'");
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no ':PORT'");
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return bad("an IPv6 address needs brackets, as [" + printable(out.host) + "]:PORT");
    }
  }
  if (out.host.empty()) return bad("no address");
  for (unsigned char c : out.host) {
    // No name or numeric address holds one; a line's other words or a stray byte do.
    if (c <= ' ' || c == 0x7f)
      return bad("address '" + printable(out.host) + "' holds a space or control byte");
  }
  const int low = zero == PortZero::allowed ? 0 : 1;
  long value = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) {
    if (c < '0' || c > '9') digits = false;
    if (digits) value = value * 10 + (c - '0');
  }
  if (!digits || value < low || value > 65535) {
    return bad("port '" + printable(port) + "' is not a number from " + std::to_string(low) +
               " to 65535");
  }
  out.port = static_cast<int>(value);
  return out;
}

Result<sockaddr_storage> resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return Error("cannot resolve " + printable(host) + ": " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

std::string sockaddr_text(const sockaddr_storage& address) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
    return address_text(ip, ntohs(v4->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
    return address_text(ip, ntohs(v6->sin6_port));
  }
  return "?";
}

std::string listening_line(std::string_view host, int port) {
  return std::string(listening_prefix) + address_text(host, port);
}

Result<HostPort> parse_listening_line(std::string_view line) {
  if (!line.starts_with(listening_prefix)) return Error("not a line 'listening HOST:PORT'");
  // The port an agent bound: never 0, which only asks the system to choose one.
  return parse_address(line.substr(listening_prefix.size()));
}

}  // namespace rig::remote
