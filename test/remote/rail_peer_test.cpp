// Rails of a real rigd against a controller played by hand (wire_peer.hpp's FakeController) that
// holds the key and breaks the rail protocol: each break fails the job with the exact root cause,
// which the agent's ABORT carries and rigd logs as the job's end. And a controller that is a
// rail's destination and stops reading: the agent's send stalls, and the job fails with the
// send-progress cause within its bound. Liveness times are scaled down by 10 (1 s of silence, a
// send without progress for 1 s), as in fault_test.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote/limits.hpp"
#include "remote/wire/frame.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"
#include "support/process.hpp"
#include "support/wire_peer.hpp"

using namespace rig::remote;
using rig::test::FakeController;
using rig::test::load_key;
using rig::test::load_program;
using rig::test::make_key_file;
using rig::test::make_memory;
using rig::test::next_of;
using rig::test::Rigd;

namespace {

Rigd scaled_rigd(const std::string& key_file) {
  return Rigd(key_file, {"--test-timing-divisor", std::to_string(rig::test::scaled_divisor)});
}

// The reason of the agent's ABORT, skipping what comes before it; nothing if none came.
std::optional<std::string> abort_reason(FakeController& c) {
  for (;;) {
    auto m = c.next();
    if (!m) return std::nullopt;
    if (auto* abort = std::get_if<Abort>(&*m)) return abort->reason;
  }
}

// Rail `id` of one transfer between `bytes` of `memory` at the agent (as `role`) and this
// controller, held.
void make_rail(FakeController& c, std::uint32_t id, std::uint8_t role, std::uint64_t memory,
               std::uint64_t bytes) {
  c.send(RailMake{id, role, "", {{memory, 0, bytes}}});
  CHECK(next_of<RailMade>(c).why == "");
}

Bytes chunk_and_data(const RailChunk& chunk, std::size_t n) {
  Bytes out;
  encode(chunk, out);
  const std::size_t at = out.size();
  out.resize(at + frame_header_bytes + n, 0x5a);
  write_frame_header(
      std::span<std::uint8_t, frame_header_bytes>(out.data() + at, frame_header_bytes),
      RailData::type, n);
  return out;
}

void send_bytes(FakeController& c, const Bytes& b) {
  rig::test::FakeAgent::send_all(c.s, std::vector<std::uint8_t>(b.begin(), b.end()));
}

// The agent's ABORT, then rigd's log line for the end of job `job`: both carry `cause`.
void check_failed(FakeController& c, Rigd& a, int job, const std::string& cause) {
  const auto reason = abort_reason(c);
  REQUIRE(reason.has_value());
  CHECK(*reason == cause);
  CHECK(rig::test::end_and_drain(c.s) == 0);
  c.s = -1;
  CHECK(a.job_end(job).value_or("(no end)") == "rigd[" + std::to_string(a.p->pid()) + "]: job " +
                                                   std::to_string(job) + ": failed " + cause);
}

// Whether process `pid` (a job process of rigd's, which reaps it) is gone within 5 s.
bool gone(pid_t pid) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::kill(pid, 0) == 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

TEST_CASE("a controller's rail messages that name what the job does not hold fail it, named") {
  const std::string key_file = make_key_file("rail-unheld");
  const auto key = load_key(key_file);
  Rigd a = scaled_rigd(key_file);
  int job = 0;
  struct Case {
    std::string what;
    // Sent after the job's start, with memory `m` (4096 bytes) made and rail 1 held as the
    // source of a rail to this controller.
    std::function<void(FakeController&, std::uint64_t m)> send;
    std::string cause;
  };
  const std::vector<Case> cases = {
      {"RAIL naming memory the job does not hold",
       [](FakeController& c, std::uint64_t m) {
         c.send(RailMake{2, 0, "", {{m + 40, 0, 8}}});
       },
       "RAIL names memory 41, which the job does not hold on this machine"},
      {"RAIL naming held memory, then memory the job does not hold",
       [](FakeController& c, std::uint64_t m) {
         c.send(RailMake{2, 1, "", {{m, 0, 8}, {m + 40, 0, 8}}});
       },
       "RAIL names memory 41, which the job does not hold on this machine"},
      {"RAIL naming a rail held already",
       [](FakeController& c, std::uint64_t m) {
         c.send(RailMake{1, 1, "", {{m, 0, 8}}});
       },
       "controller: malformed message: RAIL names rail 1, which is no new rail"},
      {"RAIL naming an end that is no machine of the job",
       [](FakeController& c, std::uint64_t m) {
         c.send(RailMake{2, 1, "zz\n", {{m, 0, 8}}});
       },
       "controller: malformed message: RAIL names 'zz\\n' as its other end, which is no machine "
       "of the job connected to this one"},
      {"RAIL beyond its memory",
       [](FakeController& c, std::uint64_t m) {
         c.send(RailMake{2, 1, "", {{m, 4000, 97}}});
       },
       "controller: malformed message: RAIL transfer 0: 97 bytes at 4000 of memory 1 of 4096 "
       "bytes"},
      {"RAIL_GO for a rail not held",
       [](FakeController& c, std::uint64_t) {
         c.send(RailGo{9, 1});
       },
       "RAIL_GO names rail 9, which the job does not hold on this machine"},
      {"RAIL_EXPECT for a rail not held",
       [](FakeController& c, std::uint64_t) {
         c.send(RailExpect{9, 1});
       },
       "RAIL_EXPECT names rail 9, which the job does not hold on this machine"},
      {"RAIL_END for a rail not held", [](FakeController& c, std::uint64_t) { c.send(RailEnd{9}); },
       // A RAIL_END of a rail this machine is not the destination of is the controller's, applied
       // in order (the rail's RAIL may still be queued), and names the rail as the others do.
       "RAIL_END names rail 9, which the job does not hold on this machine"},
      {"RAIL_END for the rail the agent is the source of, then RAIL_GO for it",
       [](FakeController& c, std::uint64_t) {
         c.send(RailEnd{1});
         c.send(RailGo{1, 1});
       },
       "RAIL_GO names rail 1, which the job does not hold on this machine"},
      {"RAIL_EXPECT for a rail of which the agent is the source",
       [](FakeController& c, std::uint64_t) {
         c.send(RailExpect{1, 1});
       },
       "controller: malformed message: RAIL_EXPECT names rail 1, of which this machine is not "
       "the destination"},
      {"RAIL_GO out of its turn",
       [](FakeController& c, std::uint64_t) {
         c.send(RailGo{1, 2});
       },
       "controller: malformed message: RAIL_GO of round 2 of rail 1 where round 1 was due"},
      {"RAIL_GO whose ahead is neither 0 nor 1",
       [](FakeController& c, std::uint64_t) {
         c.send(RailGo{1, 1, 2});
       },
       "controller: malformed message: RAIL_GO of rail 1 with ahead 2"},
      {"RAIL_AWAIT for a rail not held",
       [](FakeController& c, std::uint64_t) {
         c.send(RailAwait{9, 1});
       },
       "RAIL_AWAIT names rail 9, which the job does not hold on this machine"},
      {"RAIL_AWAIT for a rail of which the agent is the source",
       [](FakeController& c, std::uint64_t) {
         c.send(RailAwait{1, 1});
       },
       "controller: malformed message: RAIL_AWAIT names rail 1, of which this machine is not "
       "the destination"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    ++job;
    FakeController c(a.port, key, "me");
    c.start("me");
    const std::uint64_t m = make_memory(c, 4096);
    REQUIRE(m == 1);  // the texts above name it
    make_rail(c, 1, RailMake::source, m, 4096);
    k.send(c, m);
    check_failed(c, a, job, k.cause);
  }
}

TEST_CASE("a controller that is a rail's source and sends chunks out of order fails the job") {
  const std::string key_file = make_key_file("rail-chunks");
  const auto key = load_key(key_file);
  Rigd a = scaled_rigd(key_file);
  struct Case {
    std::string what;
    std::vector<Bytes> frames;
    std::string cause;
  };
  const std::size_t n = 4096;
  Bytes data_alone(frame_header_bytes + 16, 0);
  write_frame_header(
      std::span<std::uint8_t, frame_header_bytes>(data_alone.data(), frame_header_bytes),
      RailData::type, 16);
  const std::vector<Case> cases = {
      {"a chunk of a later round",
       {chunk_and_data({1, 2, 0, 0}, 16)},
       "controller: malformed message: RAIL_CHUNK of rail 1 round 2 transfer 0 offset 0 where "
       "round 1 transfer 0 offset 0 was due"},
      {"a chunk that skips bytes",
       {chunk_and_data({1, 1, 0, 0}, 16), chunk_and_data({1, 1, 0, 32}, 16)},
       "controller: malformed message: RAIL_CHUNK of rail 1 round 1 transfer 0 offset 32 where "
       "round 1 transfer 0 offset 16 was due"},
      {"bytes beyond the transfer",
       {chunk_and_data({1, 1, 0, 0}, 16), chunk_and_data({1, 1, 0, 16}, n - 15)},
       "controller: malformed message: RAIL_DATA of 4081 bytes where 4080 of transfer 0 of rail "
       "1 were due"},
      {"data without a chunk",
       {data_alone},
       "controller: malformed message: RAIL_DATA where no RAIL_CHUNK came before it"},
      {"a chunk for a rail not held",
       {chunk_and_data({5, 1, 0, 0}, 16)},
       "controller: malformed message: RAIL_CHUNK names rail 5, which the job does not hold on "
       "this machine"},
      {"a chunk for a rail of which the agent is the source",
       {chunk_and_data({2, 1, 0, 0}, 16)},
       "controller: malformed message: RAIL_CHUNK names rail 2, of which this machine is not the "
       "destination"},
      {"a chunk whose driven is neither 0 nor 1",
       {chunk_and_data({1, 1, 0, 0, 2}, 16)},
       "controller: malformed message: RAIL_CHUNK of rail 1 with driven 2"},
  };
  int job = 0;
  for (const Case& k : cases) {
    CAPTURE(k.what);
    ++job;
    FakeController c(a.port, key, "me");
    c.start("me");
    const std::uint64_t m = make_memory(c, n);
    make_rail(c, 1, RailMake::destination, m, n);
    make_rail(c, 2, RailMake::source, m, n);
    for (const Bytes& f : k.frames) send_bytes(c, f);
    check_failed(c, a, job, k.cause);
  }
}

TEST_CASE("a SUBMIT whose run names a rail the job does not hold fails the job, named") {
  const std::string key_file = make_key_file("rail-submit");
  Rigd a = scaled_rigd(key_file);
  const pid_t job = a.job_pid(1);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  const std::uint64_t m = make_memory(c, 64);
  make_rail(c, 1, RailMake::source, m, 64);
  // The run needs an image the job holds: the test kernels, loaded by hand.
  const std::uint64_t image = load_program(c, rig::test::test_kernels_bytes());
  WirePart run;
  run.kind = WirePart::run;
  run.image = image;
  run.entry = "rail_pingpong";
  run.args.push_back(WireArg{0, 1, 0, WireArg::rail});  // held: its record's address
  run.args.push_back(WireArg{0, 7, 0, WireArg::rail});  // not held
  Submit submit{0, 1, {}};
  submit.parts.push_back(run);
  c.send(submit);
  check_failed(c, a, 1, "SUBMIT names rail 7, which the job does not hold on this machine");
  CHECK(gone(job));
}

TEST_CASE("a controller that is a rail's destination and stops reading: the send-progress cause") {
  const std::string key_file = make_key_file("rail-stall");
  Rigd a = scaled_rigd(key_file);
  const pid_t job = a.job_pid(1);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  // A small receive buffer, fixed (no autotuning): the agent's bytes back up at once.
  const int receive_bytes = 64 * 1024;
  REQUIRE(setsockopt(c.s, SOL_SOCKET, SO_RCVBUF, &receive_bytes, sizeof receive_bytes) == 0);
  const std::uint64_t n = std::uint64_t{64} << 20;  // more than both kernels' buffers hold
  const std::uint64_t m = make_memory(c, n);
  make_rail(c, 1, RailMake::source, m, n);
  c.send(RailGo{1, 1});
  // Alive (a heartbeat every 50 ms) but reading nothing more. The last growth of what this
  // kernel holds is the agent's last acknowledged byte: its stall clock starts after it.
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::atomic<bool> done{false};
  std::atomic<double> before_last_s{0}, last_s{0};
  std::thread alive([&] {
    int last = -1;
    double previous = 0;
    auto heartbeat = clock::now();
    while (!done.load()) {
      const double before = rig::test::seconds_since(t0);
      int queued = 0;
      if (ioctl(c.s, FIONREAD, &queued) == 0 && queued != last) {
        last = queued;
        before_last_s = previous;
        last_s = rig::test::seconds_since(t0);
      }
      previous = before;
      if (clock::now() - heartbeat >= std::chrono::milliseconds(50)) {
        heartbeat = clock::now();
        std::vector<std::uint8_t> b;
        encode(Heartbeat{}, b);
        if (::send(c.s, b.data(), b.size(), MSG_NOSIGNAL) <= 0) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto end = a.job_end(1, 10'000);
  const double detected = rig::test::seconds_since(t0);
  done = true;
  alive.join();
  MESSAGE("rail send stall: the agent's last byte after "
          << before_last_s.load() << " s, by " << last_s.load() << " s; its end logged at "
          << detected << " s");
  CHECK(end.value_or("(no end)") == "rigd[" + std::to_string(a.p->pid()) +
                                        "]: job 1: failed controller: a send made no progress "
                                        "for 1 s");
  CHECK(detected >= before_last_s.load() + 1.0);
  // rigd logs the end once the job process has closed its connections: the agent's drain ends by
  // the kernel's TCP_USER_TIMEOUT (1.5 s after the last acknowledgement, scaled), as the abort
  // cannot leave. The cause above proves the send rule fired first, within 1.5 s.
  CHECK(detected <= last_s.load() + 1.5 + 0.5 * rig::test::sanitizer_slowdown);
  ::close(c.s);  // over unread bytes: a reset
  c.s = -1;
  CHECK(gone(job));
}
