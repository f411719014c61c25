#include "tcp.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "remote/io/address.hpp"

namespace rig::bench {

namespace {

// Larger than any message the harness sends; a peer asked for more is talking nonsense.
constexpr std::uint32_t message_bytes_max = 1 << 20;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Blocking exact read; false at end of stream.
bool read_exact(int fd, void* p, std::size_t n) {
  auto* b = static_cast<std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_exact(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Busy-polling exact read on a non-blocking socket: never sleeps in the kernel.
bool spin_read_exact(int fd, void* p, std::size_t n) {
  auto* b = static_cast<std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

void serve(int fd) {
  char mode = 0;
  std::uint32_t size = 0;
  if (!read_exact(fd, &mode, 1) || !read_exact(fd, &size, sizeof size)) return;
  if (size == 0 || size > message_bytes_max) return;
  std::vector<std::uint8_t> buf(std::max<std::size_t>(size, stream_chunk_bytes));
  switch (static_cast<EchoMode>(mode)) {
    case EchoMode::blocking:
    case EchoMode::spinning:
      // Whatever has arrived goes back in one write: one message at a time for a ping-pong, and
      // as many as are queued for a pipelined client, which is the least raw TCP can do for it.
      for (;;) {
        const int flags = static_cast<EchoMode>(mode) == EchoMode::spinning ? MSG_DONTWAIT : 0;
        const ssize_t r = recv(fd, buf.data(), buf.size(), flags);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0 || !write_exact(fd, buf.data(), static_cast<std::size_t>(r))) return;
      }
    case EchoMode::stream:
    case EchoMode::stream_placed: {
      // Placed: the bytes land across `placed`, grown to the largest transfer and every page
      // touched as it grows (in a transfer a measurement leaves out, the first of its size), so
      // that a transfer writes as much memory as a copy of its size does: a buffer of 1 MiB read
      // into again and again stays in the cache, which no copy's destination does.
      const bool place = static_cast<EchoMode>(mode) == EchoMode::stream_placed;
      std::vector<std::uint8_t> placed;
      for (;;) {
        std::uint64_t left = 0;
        if (!read_exact(fd, &left, sizeof left)) return;
        if (place && placed.size() < left) placed.assign(static_cast<std::size_t>(left), 0);
        std::size_t at = 0;
        while (left > 0) {
          const std::size_t want = left < buf.size() ? static_cast<std::size_t>(left) : buf.size();
          const ssize_t r = recv(fd, place ? placed.data() + at : buf.data(), want, 0);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) return;
          left -= static_cast<std::uint64_t>(r);
          at += static_cast<std::size_t>(r);
        }
        const std::uint8_t ack = 1;
        if (!write_exact(fd, &ack, 1)) return;
      }
    }
  }
}

}  // namespace

int run_echo_peer(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &ai) != 0 || ai == nullptr) {
    std::fprintf(stderr, "rig-bench echo: cannot resolve %s\n", host.c_str());
    return 1;
  }
  const int ls = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ls < 0 || bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, 16) != 0) {
    std::fprintf(stderr, "rig-bench echo: cannot listen at %s: %s\n",
                 rig::remote::address_text(host, port).c_str(), std::strerror(errno));
    return 1;
  }
  freeaddrinfo(ai);
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  const int bound = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  std::printf("%s\n", rig::remote::listening_line(host, bound).c_str());
  std::fflush(stdout);
  for (;;) {
    const int fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return 1;
    }
    no_delay(fd);
    serve(fd);
    close(fd);
  }
}

EchoClient::EchoClient(const std::string& host, int port, EchoMode mode,
                       std::uint32_t message_bytes)
    : mode_(mode), out_(message_bytes, 0x5A), in_(message_bytes) {
  const auto peer = rig::remote::resolve(host, port);
  if (!peer) throw std::runtime_error("the echo peer: " + peer.error());
  const socklen_t peer_bytes =
      peer->ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  fd_ = socket(peer->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<const sockaddr*>(&*peer), peer_bytes) != 0) {
    fail("cannot connect to the echo peer " + rig::remote::address_text(host, port));
  }
  no_delay(fd_);
  const char m = static_cast<char>(mode);
  send_all(&m, 1);
  send_all(&message_bytes, sizeof message_bytes);
  if (mode == EchoMode::spinning) fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

EchoClient::~EchoClient() {
  if (fd_ >= 0) close(fd_);
}

void EchoClient::send_all(const void* p, std::size_t n) {
  if (!write_exact(fd_, p, n)) fail("echo peer: send");
}

void EchoClient::recv_all(void* p, std::size_t n) {
  const bool ok = mode_ == EchoMode::spinning ? spin_read_exact(fd_, p, n) : read_exact(fd_, p, n);
  if (!ok) fail("echo peer: receive");
}

void EchoClient::round_trip() {
  send_all(out_.data(), out_.size());
  recv_all(in_.data(), in_.size());
}

void EchoClient::pipeline_fill(std::size_t window) {
  const std::size_t m = out_.size();
  window_out_.assign(window * m, 0x5A);
  window_in_.resize(window * m);
  send_all(window_out_.data(), window_out_.size());
  in_flight_ = window;
  partial_ = 0;
}

std::size_t EchoClient::pipeline_step() {
  const std::size_t m = out_.size();
  ssize_t r;
  do {
    r = recv(fd_, window_in_.data(), window_in_.size() - partial_, 0);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) fail("echo peer: receive");
  partial_ += static_cast<std::size_t>(r);
  const std::size_t done = partial_ / m;
  partial_ %= m;
  if (done > 0) send_all(window_out_.data(), done * m);
  return done;
}

void EchoClient::pipeline_drain() {
  std::size_t left = in_flight_ * out_.size() - partial_;
  while (left > 0) {
    const std::size_t n = std::min(left, window_in_.size());
    recv_all(window_in_.data(), n);
    left -= n;
  }
  in_flight_ = 0;
  partial_ = 0;
}

void EchoClient::transfer(const std::uint8_t* data, std::uint64_t bytes) {
  send_all(&bytes, sizeof bytes);
  for (std::uint64_t off = 0; off < bytes; off += stream_chunk_bytes) {
    const std::uint64_t n = bytes - off < stream_chunk_bytes ? bytes - off : stream_chunk_bytes;
    send_all(data + off, static_cast<std::size_t>(n));
  }
  std::uint8_t ack = 0;
  recv_all(&ack, 1);
}

}  // namespace rig::bench
