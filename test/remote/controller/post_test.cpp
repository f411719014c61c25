// Functions run on a loop's thread from another thread.
#include "remote/controller/post.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <thread>

#include "remote/io/clock.hpp"
#include "remote/io/reactor.hpp"

using namespace rig::remote;

TEST_CASE(
    "call_function runs on the loop thread and raises in the caller what the function raised") {
  ManualClock clock;
  Reactor reactor(clock, 1000);
  std::thread loop([&] { reactor.run(); });
  bool on_loop = false;
  call_function(reactor, [&] { on_loop = reactor.on_loop_thread(); });
  CHECK(on_loop);
  // A throw there is not the loop's end (nor the process's): it comes back here, whole.
  CHECK_THROWS_WITH_AS(call_function(reactor, [] { throw std::runtime_error("boom"); }), "boom",
                       std::runtime_error);
  int runs = 0;
  call_function(reactor, [&] { ++runs; });
  CHECK(runs == 1);
  call_function(reactor, [&] { reactor.stop(); });
  loop.join();
}
