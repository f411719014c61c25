// Strangers for the tests of what they cost an agent: connections to its port that never prove
// the key, made by hand, of five kinds (idle, a few bytes, slow, garbage, truncated handshakes).
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace rig::test {

// What a stranger sends.
enum class StrangerKind : std::uint8_t {
  idle,       // nothing
  length,     // a proof's 4-byte length, then nothing: a handshake that stops after 4 bytes
  slow,       // a proof's length, then a byte every slow_byte_ms (Strangers::trickle)
  garbage,    // 64 bytes that are no proof: refused at once
  truncated,  // a proof's length and half its body, then the end of its side
};
inline constexpr int slow_byte_ms = 500;

// Connections to 127.0.0.1:port that prove nothing. Owner: the test. Threads: the test's, and the
// one knock() starts, which stop() (or the destructor) joins. Each socket is closed with a reset,
// so that thousands of them leave no TIME_WAIT behind on this machine.
class Strangers {
 public:
  explicit Strangers(int port) : port_(port) {}
  ~Strangers() {
    stop();
    close_all();
  }
  Strangers(const Strangers&) = delete;
  Strangers& operator=(const Strangers&) = delete;

  // Opens `n` strangers now, of `kind`.
  void open(std::size_t n, StrangerKind kind) {
    for (std::size_t i = 0; i < n; ++i) open_one(kind);
  }
  // Opens `n` strangers now, the kinds in turn.
  void open_mixed(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) open_one(static_cast<StrangerKind>(i % 5));
  }

  // From another thread: a stranger of the next kind every `period_us`, until stop(); when more
  // than `live_max` are open here, the oldest is closed first. Slow strangers get their next byte
  // every slow_byte_ms.
  void knock(int period_us, std::size_t live_max) {
    stop();
    stopping_ = false;
    knocker_ = std::thread([this, period_us, live_max] {
      auto next_trickle = std::chrono::steady_clock::now();
      for (std::size_t i = 0; !stopping_; ++i) {
        {
          std::lock_guard lock(mu_);
          if (socks_.size() >= live_max) {
            close_reset(socks_.front().fd);
            socks_.pop_front();
          }
        }
        open_one(static_cast<StrangerKind>(i % 5));
        if (std::chrono::steady_clock::now() >= next_trickle) {
          trickle();
          next_trickle += std::chrono::milliseconds(slow_byte_ms);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(period_us));
      }
    });
  }
  void stop() {
    stopping_ = true;
    if (knocker_.joinable()) knocker_.join();
  }

  // One more byte from each slow stranger.
  void trickle() {
    std::lock_guard lock(mu_);
    const std::uint8_t b = 0;
    for (const auto& s : socks_) {
      if (s.kind == StrangerKind::slow) (void)!::send(s.fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }

  std::size_t opened() const { return opened_; }
  std::size_t open_now() {
    std::lock_guard lock(mu_);
    return socks_.size();
  }
  void close_all() {
    std::lock_guard lock(mu_);
    for (const auto& s : socks_) close_reset(s.fd);
    socks_.clear();
  }

 private:
  struct Sock {
    int fd;
    StrangerKind kind;
  };

  static void close_reset(int fd) {
    const linger reset{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    ::close(fd);
  }

  void open_one(StrangerKind kind) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(s >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Over loopback the connect completes at once while the agent's backlog has room; otherwise it
    // stays pending, and what is sent below is lost, which is a stranger too.
    (void)::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    // A proof of 100 bytes: under the maximum, so the agent waits for its body.
    const std::uint8_t length[4] = {100, 0, 0, 0};
    switch (kind) {
      case StrangerKind::idle:
        break;
      case StrangerKind::length:
      case StrangerKind::slow:
        (void)!::send(s, length, sizeof length, MSG_NOSIGNAL);
        break;
      case StrangerKind::garbage: {
        std::uint8_t junk[64];
        for (std::size_t i = 0; i < sizeof junk; ++i) junk[i] = static_cast<std::uint8_t>(0xa5 ^ i);
        (void)!::send(s, junk, sizeof junk, MSG_NOSIGNAL);
        break;
      }
      case StrangerKind::truncated: {
        std::uint8_t part[4 + 50] = {100, 0, 0, 0};
        (void)!::send(s, part, sizeof part, MSG_NOSIGNAL);
        ::shutdown(s, SHUT_WR);
        break;
      }
    }
    std::lock_guard lock(mu_);
    socks_.push_back({s, kind});
    ++opened_;
  }

  int port_;
  std::mutex mu_;
  std::deque<Sock> socks_;  // oldest first
  std::atomic<std::size_t> opened_{0};
  std::atomic<bool> stopping_{false};
  std::thread knocker_;
};

}  // namespace rig::test
