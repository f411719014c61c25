// What each accept(2) error makes an agent's listener do.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "remote/io/listener.hpp"

using rig::remote::AcceptError;
using rig::remote::classify_accept_error;
using rig::remote::Listener;

namespace {

// A listener on loopback with one connection waiting in its backlog, in a process that has no
// descriptor left to accept it with: the soft limit lowered to what is open, the rest filled.
// Owner: the test's stack frame. Lifetime: the scope, which gives every descriptor and the limit
// back.
struct OutOfDescriptors {
  OutOfDescriptors() {
    REQUIRE(uv_loop_init(&loop) == 0);
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(::listen(listen_fd, 8) == 0);
    socklen_t len = sizeof at;
    REQUIRE(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&at), &len) == 0);
    listener.emplace(&loop, listen_fd, events());
    REQUIRE(listener->start() == 0);
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &normal) == 0);
    rlimit tight = normal;
    tight.rlim_cur = static_cast<rlim_t>(client + 8);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
    for (int fd; (fd = ::dup(0)) >= 0;) fillers.push_back(fd);
    REQUIRE(errno == EMFILE);
  }
  ~OutOfDescriptors() {
    for (int fd : fillers) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &normal);
    ::close(client);
    for (int fd : accepted) ::close(fd);
    listener->stop();
    uv_run(&loop, UV_RUN_DEFAULT);
    listener.reset();
    uv_loop_close(&loop);
  }

  Listener::Events events() {
    return {[this](int fd) { accepted.push_back(fd); },
            [this](int err) {
              room_asked.push_back(err);
              if (!room_to_give || fillers.empty()) return false;
              ::close(fillers.back());
              fillers.pop_back();
              return true;
            },
            [this](int err) { short_of.push_back(err); },
            [this](const std::string& why) { failed = why; }};
  }

  uv_loop_t loop{};
  int listen_fd = -1;
  int client = -1;
  rlimit normal{};
  std::vector<int> fillers;
  std::optional<Listener> listener;
  bool room_to_give = true;
  std::vector<int> accepted, room_asked, short_of;
  std::string failed;
};

}  // namespace

TEST_CASE(
    "accept errors: a shortage waits and retries, a lost connection is skipped, the rest end") {
  // Nothing waiting, or a signal: poll again.
  CHECK(classify_accept_error(EAGAIN) == AcceptError::wait);
  CHECK(classify_accept_error(EWOULDBLOCK) == AcceptError::wait);
  CHECK(classify_accept_error(EINTR) == AcceptError::wait);
  // No descriptor, buffer or memory: the connection stays in the backlog for a later accept.
  for (int e : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::retry_later, e);
  }
  // The connection taken failed (Linux passes its network error to accept): take the next.
  for (int e : {ECONNABORTED, EPROTO, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP,
                ENETDOWN, ENETUNREACH, ETIMEDOUT, EPERM}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::next, e);
  }
  // The listening socket itself is unusable: serve ends with an Error naming it.
  for (int e : {EBADF, EINVAL, ENOTSOCK, EFAULT}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::fatal, e);
  }
}

TEST_CASE("out of descriptors, a listener that is given room accepts the connection at once") {
  OutOfDescriptors o;
  // One turn of the loop: the accept fails for lack of a descriptor, the agent drops a stranger
  // (here: closes a filler), and the accept is tried again in the same turn, not 0.5 s later.
  uv_run(&o.loop, UV_RUN_NOWAIT);
  CHECK(o.room_asked == std::vector<int>{EMFILE});
  CHECK(o.accepted.size() == 1);
  CHECK(o.short_of.empty());
  CHECK(o.failed.empty());
}

TEST_CASE("out of descriptors with no room to give, a listener waits and accepts after the retry") {
  OutOfDescriptors o;
  o.room_to_give = false;
  uv_run(&o.loop, UV_RUN_NOWAIT);
  CHECK(o.room_asked == std::vector<int>{EMFILE});
  CHECK(o.short_of == std::vector<int>{EMFILE});
  CHECK(o.accepted.empty());
  // A descriptor comes back by itself: the retry takes the connection, which waited in the backlog.
  ::close(o.fillers.back());
  o.fillers.pop_back();
  const auto t0 = std::chrono::steady_clock::now();
  while (o.accepted.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    uv_run(&o.loop, UV_RUN_ONCE);
  }
  CHECK(o.accepted.size() == 1);
  CHECK(o.short_of.size() == 1);  // said once, when the shortage began
  CHECK(o.failed.empty());
}
