// The agent's strangers (src/remote/agent/protocol.*): connections it accepted that have not proven
// the key. At most strangers_max wait at once; at the cap the oldest is dropped to make room, so a
// controller that holds the key gets in whatever came before it, and one that has proven it is no
// stranger any more. Over the in-memory pairs on a manual clock: nothing here sleeps.
#include "remote/agent/protocol.hpp"

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <uv.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "remote/io/memory_transport.hpp"
#include "remote/io/transport_support.hpp"

using namespace rig::remote;
using rig::remote::test::Recorder;

namespace {

const Key& the_key() {
  static const Key k = key("0123456789abcdef0123456789abcdef").value();
  return k;
}

// The agent of these tests joins no other agent.
class NoDialer final : public Dialer {
 public:
  rig::Result<std::unique_ptr<Transport>> dial(Reactor&, const Timing&, const std::string&,
                                               const std::string&,
                                               const sockaddr_storage*) override {
    return rig::Error("no dialing in this test");
  }
};

// The controller's side of its connection: what it hears.
class ControllerEnd final : public ConnectionOwner {
 public:
  std::vector<std::string> log;  // "proven", "refused WHY", "failed CAUSE", "closed"
  void on_proven(Connection&) noexcept override { log.push_back("proven"); }
  void on_message(Connection&, Message&&) noexcept override {}
  void on_bulk(Connection&, std::uint8_t, std::span<const std::uint8_t>) noexcept override {}
  void on_failed(Connection&, const std::string& cause) noexcept override {
    log.push_back("failed " + cause);
  }
  void on_refused(Connection&, const std::string& why) noexcept override {
    log.push_back("refused " + why);
  }
  void on_closed(Connection&) noexcept override { log.push_back("closed"); }
};

// A stranger: the dialing end of a pair whose listening end the agent accepted, reading what the
// agent sends it.
struct Stranger {
  std::unique_ptr<MemoryTransport> end;
  std::unique_ptr<Recorder> heard = std::make_unique<Recorder>(512);
  bool dropped() const { return heard->log().find("end EOF") != std::string::npos; }
};

// One agent on a manual clock, serving no job yet, with a cap of `cap` strangers.
struct TestAgent {
  explicit TestAgent(std::size_t cap)
      : reactor(clock, Timing{}.tick_ms),
        protocol(reactor, Timing{}, the_key(),
                 AgentProtocol::Setup{new_instance_id(),
                                      kinds,
                                      dialer,
                                      [this](const std::string& line) { log.push_back(line); },
                                      {},
                                      "x86-64",
                                      1 << 30,
                                      std::nullopt,
                                      cap}) {}
  ~TestAgent() {
    protocol.shut();
    // A transport goes only after its close is done (transport.hpp).
    for (Stranger& s : strangers) s.end->close();
    if (controller_end) controller_end->close_now();
    net.pump();
    // The closes the protocol issued complete while the memory of its handles lives.
    uv_run(reactor.loop(), UV_RUN_NOWAIT);
  }

  Stranger& knock() {
    auto pair = net.connect("10.0.0.9:" + std::to_string(50000 + knocks++), "10.0.0.1:4000");
    Stranger& s = strangers.emplace_back(Stranger{std::move(pair.dialer)});
    REQUIRE(s.end->start(*s.heard) == 0);
    protocol.accept(std::move(pair.listener));
    net.pump();
    REQUIRE(s.end->read_start() == 0);
    net.pump();
    return s;
  }

  // A controller's connection that proves the key, reporting to controller_heard.
  Connection& controller() {
    auto pair = net.connect("10.0.0.7:40000", "10.0.0.1:4000");
    controller_end =
        std::make_unique<Connection>(reactor, controller_heard, Timing{}, "10.0.0.1:4000");
    const DialerConfig config{Role::controller, "controller", new_job_id(), "10.0.0.1:4000",
                              new_instance_id()};
    controller_end->dial(std::move(pair.dialer), Handshake::dialer(the_key(), config));
    protocol.accept(std::move(pair.listener));
    net.pump();
    return *controller_end;
  }

  const std::vector<std::pair<std::string, Opener>> kinds;
  NoDialer dialer;
  ManualClock clock;
  Reactor reactor;
  MemoryNetwork net;
  std::vector<std::string> log;
  int knocks = 0;
  std::deque<Stranger> strangers;  // every stranger made, oldest first
  ControllerEnd controller_heard;
  std::unique_ptr<Connection> controller_end;
  AgentProtocol protocol;
};

}  // namespace

TEST_CASE("at the cap of strangers the oldest is dropped, and a controller with the key gets in") {
  TestAgent a(4);
  CHECK(a.protocol.strangers_max() == 4);
  for (int i = 0; i < 10; ++i) a.knock();
  const auto& strangers = a.strangers;
  // Each was greeted; the six oldest were dropped as newer ones came, the four newest wait.
  CHECK(a.protocol.strangers() == 4);
  CHECK(a.protocol.strangers_dropped() == 6);
  for (std::size_t i = 0; i < strangers.size(); ++i) {
    CAPTURE(i);
    CHECK(strangers[i].heard->bytes.size() == greeting_bytes);
    CHECK(strangers[i].dropped() == (i < 6));
  }
  // The operator hears of the drops once, when they begin.
  REQUIRE(a.log.size() == 1);
  CHECK(a.log[0] ==
        "dropped the oldest connection that had not proven the key, to make room (at the cap of "
        "4); more such drops are counted every 10 s");

  // A controller comes in behind them: its connection takes the place of the oldest stranger,
  // proves the key, and is no stranger any more.
  Connection* const c = &a.controller();
  const ControllerEnd& owner = a.controller_heard;
  CHECK(owner.log == std::vector<std::string>{"proven"});
  CHECK(c->state() == Connection::State::open);
  CHECK(a.protocol.serving());
  CHECK(strangers[6].dropped());
  CHECK(a.protocol.strangers() == 3);
  // Strangers that come later push out only strangers, never the controller.
  for (int i = 0; i < 8; ++i) a.knock();
  CHECK(a.protocol.strangers() == 4);
  CHECK(c->state() == Connection::State::open);
  CHECK(owner.log == std::vector<std::string>{"proven"});
}

TEST_CASE("strangers that time out or close are counted no more; none is dropped then") {
  TestAgent a(4);
  for (int i = 0; i < 3; ++i) a.knock();
  auto& strangers = a.strangers;
  CHECK(a.protocol.strangers() == 3);
  strangers[0].end->close();  // one goes away by itself
  a.net.pump();
  CHECK(a.protocol.strangers() == 2);
  // The others prove nothing within the handshake's deadline: the agent drops them itself.
  // Ticks as a running loop has them: one jump of 10 s would be a pause of this process, which
  // judges no deadline at its first tick.
  for (std::int64_t ms = 0; ms < Timing{}.handshake_timeout_ms; ms += 100) {
    a.clock.advance(100);
    a.reactor.tick_now();
  }
  a.net.pump();
  CHECK(a.protocol.strangers() == 0);
  CHECK(strangers[1].dropped());
  CHECK(strangers[2].dropped());
  CHECK(a.protocol.strangers_dropped() == 0);
  CHECK(a.log.empty());
}

TEST_CASE("the cap of strangers is half the descriptors a process may open, from 4 to 2048") {
  CHECK(strangers_cap(64) == 32);
  CHECK(strangers_cap(128) == 64);
  CHECK(strangers_cap(1024) == 512);
  CHECK(strangers_cap(20000) == strangers_max);
  CHECK(strangers_cap(RLIM_INFINITY) == strangers_max);
  CHECK(strangers_cap(7) == strangers_min);
  CHECK(strangers_cap(0) == strangers_min);
  CHECK(strangers_max == 2048);
  // An agent made without a cap of its own takes its process's.
  rlimit r{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &r) == 0);
  TestAgent a(0);
  CHECK(a.protocol.strangers_max() == strangers_cap(r.rlim_cur));
}
