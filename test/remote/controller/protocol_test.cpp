// The controller's protocol (src/remote/controller/protocol.*) made by a test on a reactor of its
// own, on a manual clock, without the process's loop thread: what a whole-job simulation builds on.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "remote/controller/job_state.hpp"
#include "remote/controller/protocol.hpp"
#include "remote/io/clock.hpp"
#include "remote/io/reactor.hpp"

using namespace rig::remote;

namespace {

// A job's devices that are never made: no agent gets as far as READY here.
struct NoProxies final : Proxies {
  int* calls;
  explicit NoProxies(int* c) : calls(c) {}
  std::shared_ptr<rig::detail::DeviceCore> make(std::size_t, std::uint32_t,
                                                rig::detail::DeviceInfo) override {
    ++*calls;
    return nullptr;
  }
  void add(const std::shared_ptr<rig::detail::DeviceCore>&) override { ++*calls; }
  void add_reach(rig::detail::DeviceCore&, std::uint32_t) override { ++*calls; }
  void reached(rig::detail::DeviceCore&, std::uint64_t,
               const rig::detail::Work&) noexcept override {
    ++*calls;
  }
};

}  // namespace

TEST_CASE(
    "a controller's protocol on a test's reactor and manual clock: an agent that never proves "
    "the key fails the job after the handshake's time, reported once") {
  // A listening socket that never accepts: the kernel completes the connection in its backlog, and
  // nothing ever answers the handshake.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(listener, 4) == 0);
  socklen_t length = sizeof address;
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  int report[2];
  REQUIRE(pipe(report) == 0);

  ManualClock clock;
  const std::int64_t start_ms = clock.now_ms();
  const Timing timing;
  Reactor reactor(clock, 1);
  // Time moves only here, a second at each of the loop's ticks.
  const std::uint64_t advance = reactor.add_ticker([&](std::int64_t) { clock.advance(1000); });

  auto state = std::make_shared<JobState>(getpid(), timing, report[1], 1);
  Member member;
  member.name = "agent";
  member.dial_text = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  std::memcpy(&member.address, &address, sizeof address);
  std::vector<Member> members;
  members.push_back(std::move(member));
  auto key = rig::remote::key(std::string(32, 'k'));
  REQUIRE(key.ok());
  int proxy_calls = 0;
  int finished_calls = 0;
  auto protocol = std::make_unique<ControllerProtocol>(
      reactor, timing, *key, InstanceId{}, JobId{}, state, std::move(members),
      std::make_unique<NoProxies>(&proxy_calls), rig::remote::tcp_dialer(),
      [&](ControllerProtocol&) {
        ++finished_calls;
        reactor.remove_ticker(advance);
        reactor.stop();
      });
  protocol->start();
  reactor.run();  // until the job has finished and every handle has closed

  // It never greeted: the key is not the question.
  const std::string cause = "agent: sent no greeting within 10 s";
  CHECK(finished_calls == 1);
  CHECK(protocol->finished());
  CHECK(protocol->outcome()->cause() == cause);
  CHECK(state->finished.is_set());
  CHECK_FALSE(state->started.is_set());
  CHECK(proxy_calls == 0);
  CHECK(clock.now_ms() - start_ms >= timing.handshake_timeout_ms);
  protocol.reset();
  close(report[1]);
  char line[256] = {};
  const ssize_t n = read(report[0], line, sizeof line - 1);
  CHECK(std::string(line, n > 0 ? static_cast<std::size_t>(n) : 0) == "failed " + cause + "\n");
  close(report[0]);
  close(listener);
}
