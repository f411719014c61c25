#include "http_get.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "remote/io/address.hpp"
#include "remote/io/connection.hpp"

namespace rig::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `until`, at least 0.
int left_ms(Clock::time_point until) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on `fd` until `until`: whether they came.
bool wait_for(int fd, short events, Clock::time_point until) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, left_ms(until));
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

// A socket that closes with its scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> http_exchange(const std::string& host, int port, std::string_view request,
                                  int timeout_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string timed_out = "no answer within " + rig::remote::seconds_text(timeout_ms);
  auto address = rig::remote::resolve(host, port);
  if (!address) return Error(address.error());
  Fd s{::socket(address->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return Error(std::string("socket: ") + std::strerror(errno));
  const socklen_t len = address->ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&*address), len) != 0) {
    if (errno != EINPROGRESS) return Error(std::string("connect: ") + std::strerror(errno));
    if (!wait_for(s.fd, POLLOUT, until)) return Error("connect: " + timed_out);
    int e = 0;
    socklen_t elen = sizeof e;
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &e, &elen);
    if (e != 0) return Error(std::string("connect: ") + std::strerror(e));
  }
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(s.fd, POLLOUT, until)) return Error("send: " + timed_out);
    } else {
      // The server may answer and close before it has read all (a head over its bound): what it
      // sent is still read below.
      break;
    }
  }
  std::string reply;
  for (;;) {
    char buf[16 * 1024];
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n == 0) return reply;
    if (n > 0) {
      reply.append(buf, static_cast<std::size_t>(n));
      if (reply.size() > http_reply_bytes_max) {
        return Error("read: the reply passed " + std::to_string(http_reply_bytes_max) + " bytes");
      }
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET && !reply.empty()) return reply;
    if (errno != EAGAIN) return Error(std::string("read: ") + std::strerror(errno));
    if (!wait_for(s.fd, POLLIN, until)) return Error("read: " + timed_out);
  }
}

Result<HttpReply> http_get(const std::string& host, int port, const std::string& path,
                           int timeout_ms) {
  const std::string request = "GET " + path +
                              " HTTP/1.1\r\nHost: " + rig::remote::address_text(host, port) +
                              "\r\nAccept: */*\r\nConnection: close\r\n\r\n";
  auto raw = http_exchange(host, port, request, timeout_ms);
  if (!raw) return Error(raw.error());
  const std::size_t head_end = raw->find("\r\n\r\n");
  if (!raw->starts_with("HTTP/1.") || raw->size() < 12 || head_end == std::string::npos) {
    return Error("the reply is not an HTTP/1.x response");
  }
  HttpReply r;
  char* end = nullptr;
  r.status = static_cast<int>(std::strtol(raw->c_str() + 9, &end, 10));
  if (end != raw->c_str() + 12 || r.status < 100 || r.status > 999) {
    return Error("the reply's status line is not HTTP/1.x NNN");
  }
  const std::string head = raw->substr(0, head_end);
  std::size_t content_length = std::string::npos;
  for (std::size_t at = head.find("\r\n"); at != std::string::npos;) {
    const std::size_t next = head.find("\r\n", at + 2);
    const std::string line = head.substr(at + 2, next == std::string::npos ? next : next - at - 2);
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      if (name == "content-type") r.content_type = value;
      if (name == "content-length") content_length = std::strtoull(value.c_str(), nullptr, 10);
    }
    at = next;
  }
  r.body = raw->substr(head_end + 4);
  if (content_length != std::string::npos) {
    if (r.body.size() < content_length) return Error("the reply ended before its Content-Length");
    r.body.resize(content_length);
  }
  return r;
}

}  // namespace rig::cli
