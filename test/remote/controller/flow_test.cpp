// Flow control of submissions to remote devices (src/remote/controller/flow.*): what work costs,
// and the two waits of a submit.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "remote/controller/flow.hpp"
#include "remote/limits.hpp"

using namespace rig::remote;

TEST_CASE("work costs its copies' bytes and a share of the message for it and for each part") {
  rig::detail::Work none{};
  CHECK(inflight_cost(none) == part_overhead_bytes);
  rig::detail::Work work{};
  work.parts.push_back(rig::detail::CopyWork{nullptr, 0, nullptr, 0, 1000});
  work.parts.push_back(rig::detail::RunWork{});
  CHECK(inflight_cost(work) == 3 * part_overhead_bytes + 1000);
}

TEST_CASE(
    "a submit waits while its agent's connection is sending, until it stops or the device "
    "does") {
  SendFlow sending(2);
  DeviceFlow device;
  sending.wait_while_sending(0, device);  // not sending: at once
  sending.wait_while_sending(7, device);  // no such agent in the job: nothing to wait for

  sending.set_sending(1, true);
  sending.wait_while_sending(0, device);  // another agent's connection is not this one's
  std::atomic<bool> through{false};
  std::thread waiter([&] {
    sending.wait_while_sending(1, device);
    through = true;
  });
  sending.wake_all();  // a wake while the connection still sends: the waiter goes on waiting
  CHECK_FALSE(through.load());
  sending.set_sending(1, false);
  waiter.join();
  CHECK(through.load());

  sending.set_sending(1, true);
  std::thread stopped([&] { sending.wait_while_sending(1, device); });
  device.stop();
  sending.wake_all();  // the job failed: the waiter finds its device stopped
  stopped.join();
  CHECK(device.stopped());
}

TEST_CASE("a submit waits while its device holds more than inflight_bytes_max not reached") {
  DeviceFlow device;
  device.take(inflight_bytes_max);
  device.wait_for_room();  // at the bound, not over it: at once
  device.take(1);
  std::atomic<bool> through{false};
  std::thread waiter([&] {
    device.wait_for_room();
    through = true;
  });
  CHECK_FALSE(through.load());
  device.give_back(1);
  waiter.join();
  CHECK(through.load());

  device.take(inflight_bytes_max);
  std::thread stopped([&] { device.wait_for_room(); });
  device.stop();  // closed or lost: the waiter returns, and its next check raises Lost
  stopped.join();
  CHECK(device.stopped());
}
