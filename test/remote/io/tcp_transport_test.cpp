// The TCP transport on loopback, both ends in this process on one libuv loop: a dial and an
// adopted socket, bytes in order both ways, a backlog that waits in the transport while the peer
// does not read, the kernel's acknowledged count, a half-close, a reset, and a close that leaves
// the loop with nothing open. The loop runs until what a check waits for has happened, with a
// deadline.
#include "remote/io/tcp_transport.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include "remote/io/transport_support.hpp"

using namespace rig::remote;
using rig::remote::test::Recorder;
using rig::remote::test::slice_of;

namespace {

// How long a check waits for the loop to bring what it expects.
constexpr auto wait_max = std::chrono::seconds(10);

struct Loopback {
  // Each end reads in pieces of `read_piece` bytes at most.
  explicit Loopback(std::size_t read_piece = 7) : ra(read_piece), rb(read_piece) {
    REQUIRE(uv_loop_init(&loop) == 0);
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);

    a_ = TcpTransport::dial(&loop, reinterpret_cast<sockaddr*>(&a), 15'000);
    REQUIRE(a_->dialing());
    REQUIRE(a_->start(ra) == 0);
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    REQUIRE(fd >= 0);
    b_ = TcpTransport::adopt(&loop, fd, 15'000);
    REQUIRE(!b_->dialing());
    REQUIRE(b_->start(rb) == 0);
    REQUIRE(run_until([&] { return !ra.events.empty(); }));
    REQUIRE(ra.log() == "connected 0");
    REQUIRE(a_->read_start() == 0);
  }
  ~Loopback() {
    a_->close();
    b_->close();
    CHECK(run_until([&] { return ra.closed && rb.closed; }));
    a_.reset();
    b_.reset();
    ::close(listen_fd);
    CHECK(uv_loop_close(&loop) == 0);  // every handle closed
  }

  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + wait_max;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    return true;
  }
  int write(Transport& t, const std::string& text) {
    const Slice s = slice_of(text);
    return t.write({&s, 1});
  }

  uv_loop_t loop{};
  int listen_fd = -1;
  int port = 0;
  Recorder ra, rb;
  std::unique_ptr<TcpTransport> a_, b_;
};

}  // namespace

TEST_CASE("tcp transport: a dial and an adopted socket carry bytes in order both ways") {
  Loopback l;
  REQUIRE(l.b_->read_start() == 0);
  CHECK(l.a_->peer_address() == "127.0.0.1:" + std::to_string(l.port));
  CHECK(l.b_->peer_address().rfind("127.0.0.1:", 0) == 0);
  const std::string hello = "hello ", wor = "wor", ld = "ld";
  CHECK(l.write(*l.a_, hello) == 0);
  const Slice two[] = {slice_of(wor), slice_of(ld)};
  CHECK(l.a_->write(two) == 0);  // the fast path: all of it into the socket at once
  CHECK(l.run_until([&] { return l.rb.bytes.size() == 11; }));
  CHECK(l.rb.text() == "hello world");
  const std::string back = "and back";
  CHECK(l.write(*l.b_, back) == 0);
  CHECK(l.run_until([&] { return l.ra.bytes.size() == back.size(); }));
  CHECK(l.ra.text() == back);
  TcpSendState s{};
  CHECK(l.run_until([&] { return l.a_->send_state(s) && s.acked_bytes >= 11; }));
  CHECK(s.queued_bytes == 0);
}

TEST_CASE("tcp transport: what the kernel does not take waits in the transport until read") {
  Loopback l(64 * 1024);
  // Far more than loopback's socket buffers hold while the peer does not read.
  const std::string big(64 * 1024 * 1024, 'b');
  CHECK(l.write(*l.a_, big) == write_queued);
  CHECK(l.a_->queued_bytes() > 0);
  CHECK(l.ra.log() == "connected 0");
  REQUIRE(l.b_->read_start() == 0);
  CHECK(l.run_until([&] { return l.rb.bytes.size() == big.size(); }));
  CHECK(l.run_until([&] { return l.ra.events.size() == 2; }));
  CHECK(l.ra.log() == "connected 0, written 0");
  CHECK(l.a_->queued_bytes() == 0);
  CHECK(l.rb.text() == big);
}

TEST_CASE("tcp transport: a half-close is the peer's EOF; a reset is ECONNRESET at both ends") {
  SUBCASE("half-close") {
    Loopback l;
    REQUIRE(l.b_->read_start() == 0);
    const std::string last = "last";
    CHECK(l.write(*l.a_, last) == 0);
    CHECK(l.a_->shutdown() == 0);
    CHECK(l.run_until([&] { return l.rb.read_end != 0; }));
    CHECK(l.rb.text() == last);
    CHECK(l.rb.read_end == UV_EOF);
    CHECK(l.run_until([&] { return l.ra.events.size() == 2; }));
    CHECK(l.ra.log() == "connected 0, shutdown 0");
  }
  SUBCASE("reset") {
    Loopback l;
    REQUIRE(l.b_->read_start() == 0);
    l.a_->reset();
    CHECK(l.run_until([&] { return l.ra.read_end != 0 && l.rb.read_end != 0; }));
    CHECK(l.ra.read_end == UV_ECONNRESET);
    CHECK(l.rb.read_end == UV_ECONNRESET);
  }
}
