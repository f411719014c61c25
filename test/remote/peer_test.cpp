// A real rigd against a controller played by hand (wire_peer.hpp's FakeController) that holds the
// key and misbehaves: names and reasons that would forge rigd's log lines, and a LOAD that
// announces far more bytes than it sends. Liveness times are scaled down by 10 (1 s of silence,
// a heartbeat every 100 ms), as in fault_test.cpp. And one that times its bytes exactly: a copy's
// first frame half sent when the work before it ends.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "remote/limits.hpp"
#include "remote/wire/frame.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"
#include "support/pattern.hpp"
#include "support/process.hpp"
#include "support/wire_peer.hpp"

using rig::test::FakeController;
using rig::test::load_key;
using rig::test::make_key_file;
using rig::test::Rigd;
using rig::test::scaled_divisor;

namespace {

// A name, or a reason, that holds a whole log line of rigd's after a newline, and clears the
// operator's terminal.
const std::string forged = "x\nrigd[1]: job 999: closed\x1b[2J";
// How it reads once escaped.
const std::string forged_escaped = "x\\nrigd[1]: job 999: closed\\x1b[2J";

Rigd scaled_rigd(const std::string& key_file) {
  return Rigd(key_file, {"--test-timing-divisor", std::to_string(scaled_divisor)});
}

// rigd's log lines up to and including the end of job `n` (the daemon's "job N: " + end line).
std::vector<std::string> log_to_end(Rigd& a, int n) {
  std::vector<std::string> lines;
  const std::string job = "job " + std::to_string(n) + ": ";
  while (auto l = a.p->err_line(10'000)) {
    lines.push_back(*l);
    if (l->find(job) != std::string::npos && !Rigd::is_job_progress(*l)) break;
  }
  return lines;
}

// Every line is one of rigd's own, "rigd[PID]: " with its real PID, and none holds an escape code.
void check_no_forged_line(const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    INFO("log line: " << l);
    CHECK(l.starts_with("rigd["));
    CHECK_FALSE(l.starts_with("rigd[1]:"));
    CHECK(l.find('\x1b') == std::string::npos);
  }
}

std::string find_line(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines) {
    if (l.find(needle) != std::string::npos) return l;
  }
  return "(no line with '" + needle + "')";
}

// What the agent sent while the hand-made controller trickled PAYLOAD bytes of the message before.
struct Trickle {
  std::size_t sent = 0;  // PAYLOAD bytes
  long heartbeats = 0;
  double longest_gap_s = 0;  // between two frames from the agent
  std::string other;         // the first frame that was not a heartbeat, if one came
};

// For `seconds` (twice the agent's silence rule, scaled), 64 KiB of PAYLOAD and a heartbeat every
// 50 ms, while every frame from the agent is read.
Trickle trickle(FakeController& c, double seconds) {
  const std::vector<std::uint8_t> piece(64 * 1024, 0x5a);
  std::vector<std::uint8_t> header(rig::remote::frame_header_bytes);
  rig::remote::write_frame_header(std::span<std::uint8_t, rig::remote::frame_header_bytes>(header),
                                  rig::remote::Payload::type, piece.size());
  Trickle out;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_heard = t0;
  while (rig::test::seconds_since(t0) < seconds) {
    rig::test::FakeAgent::send_all(c.s, header);
    rig::test::FakeAgent::send_all(c.s, piece);
    out.sent += piece.size();
    c.send(rig::remote::Heartbeat{});
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{c.s, POLLIN, 0};
      if (::poll(&p, 1, 10) != 1) continue;
      std::uint8_t buf[4096];
      const ssize_t n = ::read(c.s, buf, sizeof buf);
      if (n <= 0) return out;
      c.d.feed({buf, static_cast<std::size_t>(n)});
      for (auto f = c.d.next(); f && f->has_value(); f = c.d.next()) {
        auto m = rig::remote::decode(**f);
        if (!m) return out;
        if (!std::holds_alternative<rig::remote::Heartbeat>(*m)) {
          out.other = std::string(std::visit([](const auto& x) { return x.name; }, *m));
          if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) out.other += ": " + abort->reason;
          return out;
        }
        ++out.heartbeats;
        const auto now = std::chrono::steady_clock::now();
        out.longest_gap_s =
            std::max(out.longest_gap_s, std::chrono::duration<double>(now - last_heard).count());
        last_heard = now;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE(
    "a controller's name and abort that would forge log lines are logged escaped, each on one "
    "line") {
  const std::string key_file = make_key_file("peer-name");
  Rigd a = scaled_rigd(key_file);
  FakeController c(a.port, load_key(key_file), forged);
  c.start(forged);
  c.send(rig::remote::Abort{"bad\n" + forged});
  rig::test::end_and_drain(c.s);
  c.s = -1;
  const auto lines = log_to_end(a, 1);
  check_no_forged_line(lines);
  const std::string started = find_line(lines, "started by the controller at ");
  CHECK(started.find(": job 1: started by the controller at 127.0.0.1:") != std::string::npos);
  CHECK(started.ends_with(", which names this agent " + forged_escaped));
  // The agent's root cause, as the daemon logs the job's end.
  CHECK(lines.back().ends_with(": job 1: failed controller aborted: bad\\n" + forged_escaped));
}

TEST_CASE("a JOIN's names and addresses reach the agent's root cause escaped") {
  const std::string key_file = make_key_file("peer-join");
  Rigd a = scaled_rigd(key_file);
  FakeController c(a.port, load_key(key_file), "me");
  // The second agent's name would forge a line, its address clear the screen.
  c.send(rig::remote::Join{"me", {"me", forged}, {"127.0.0.1:1", "h\x1b[2J:1"}});
  const auto abort = c.next();
  REQUIRE(abort.has_value());
  REQUIRE(std::holds_alternative<rig::remote::Abort>(*abort));
  const std::string cause = "controller: malformed message: JOIN: the address of " +
                            forged_escaped + ": address 'h\\x1b[2J' holds a space or control byte";
  CHECK(std::get<rig::remote::Abort>(*abort).reason == cause);
  rig::test::end_and_drain(c.s);
  c.s = -1;
  const auto lines = log_to_end(a, 1);
  check_no_forged_line(lines);
  CHECK(lines.back().ends_with(": job 1: failed " + cause));
}

TEST_CASE(
    "a LOAD that announces 4 GiB and sends a trickle: the agent holds what came, keeps its "
    "heartbeats, and fails when the controller closes") {
  const std::string key_file = make_key_file("peer-load");
  Rigd a = scaled_rigd(key_file);
  const pid_t job = a.job_pid(1);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  const long before_kib = rig::test::proc_status_kib(job, "VmRSS");
  c.send(rig::remote::Load{0, rig::remote::program_bytes_max});
  const Trickle t = trickle(c, 2.0);
  const long peak_kib = rig::test::proc_status_kib(job, "VmHWM");
  MESSAGE("sent " << t.sent / 1024 << " KiB of a 4 GiB program; the job process's RSS "
                  << before_kib << " KiB before, peak " << peak_kib << " KiB; " << t.heartbeats
                  << " heartbeats, the longest gap " << t.longest_gap_s << " s");
  CHECK(t.other == "");
  // What it holds grows by what came (about 2.5 MiB), not by what the LOAD announced.
  CHECK(peak_kib < before_kib + 32 * 1024);
  CHECK(t.heartbeats >= 10);
  CHECK(t.longest_gap_s < 0.5 * rig::test::sanitizer_slowdown);
  // The controller goes away in the middle of the program: the agent's connection ended without a
  // close.
  rig::test::end_and_drain(c.s);
  c.s = -1;
  const auto end = a.job_end(1);
  REQUIRE(end.has_value());
  CHECK(end->ends_with(": job 1: failed controller: closed its connection"));
}

TEST_CASE(
    "a SUBMIT that announces a 1 GiB copy from the controller and sends a trickle: the agent "
    "takes one piece of staging, not the copy's size") {
  const std::string key_file = make_key_file("peer-submit");
  Rigd a = scaled_rigd(key_file);
  const pid_t job = a.job_pid(1);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  const long before_kib = rig::test::proc_status_kib(job, "VmSize");
  rig::remote::Submit submit{0, 1, {}};
  rig::remote::WirePart copy;
  copy.kind = rig::remote::WirePart::copy;
  copy.dst = 1;  // memory the job does not hold: the copy never gets its turn
  copy.src = 0;
  copy.bytes = std::uint64_t{1} << 30;
  submit.parts.push_back(copy);
  c.send(submit);
  const Trickle t = trickle(c, 2.0);
  const long peak_kib = rig::test::proc_status_kib(job, "VmPeak");
  MESSAGE("sent " << t.sent / 1024 << " KiB of a 1 GiB copy; the job process's address space "
                  << before_kib << " KiB before, peak " << peak_kib << " KiB; " << t.heartbeats
                  << " heartbeats");
  CHECK(t.other == "");
  // The first piece (staging_piece_bytes_min, 64 MiB), with room to spare, not 1 GiB.
  CHECK(peak_kib < before_kib + 256 * 1024);
  CHECK(t.heartbeats >= 10);
  rig::test::end_and_drain(c.s);
  c.s = -1;
  const auto end = a.job_end(1);
  REQUIRE(end.has_value());
  CHECK(end->ends_with(": job 1: failed controller: closed its connection"));
}

TEST_CASE("a copy larger than one staging piece arrives whole, both ways") {
  const std::string key_file = make_key_file("peer-pieces");
  Rigd a(key_file);
  auto job = rig::remote::connect(load_key(key_file), {a.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  auto sims = rig::remote::devices(job->hosts()[0], "SIM");
  REQUIRE(sims.ok());
  // Three pieces on the agent: 64 MiB, 64 MiB, and the rest, with a tail of 3 bytes.
  const std::size_t bytes = (std::size_t{150} << 20) + 3;
  std::vector<std::uint8_t> sent(bytes), back(bytes, 0);
  std::uint32_t x = 12345;
  for (auto& b : sent) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  rig::Buffer there = rig::Buffer::make((*sims)[0], bytes);
  rig::copy(there, rig::Buffer::borrow(sent.data(), bytes));
  rig::copy(rig::Buffer::borrow(back.data(), bytes), there).wait();
  CHECK(std::equal(sent.begin(), sent.end(), back.begin()));
  // The same at an offset in a larger buffer: each piece lands at its own place after it.
  const std::size_t at = 7;
  rig::Buffer larger = rig::Buffer::make((*sims)[0], bytes + 16);
  rig::copy(larger, at, rig::Buffer::borrow(sent.data(), bytes), 0, bytes);
  std::fill(back.begin(), back.end(), 0);
  rig::copy(rig::Buffer::borrow(back.data(), bytes), 0, larger, at, bytes).wait();
  CHECK(std::equal(sent.begin(), sent.end(), back.begin()));
  there = rig::Buffer();
  larger = rig::Buffer();
  job->close();
  CHECK_FALSE(job->failed().has_value());
}

TEST_CASE(
    "a copy from the controller whose first frame is half in when the work before it ends lands "
    "whole") {
  // The agent looks once, at a SUBMIT's first byte, whether the copy may go straight to its place.
  // Here it may not (a run is still going): the first frame's bytes go into staging as they come.
  // The run ends before that frame is whole; those bytes, counted only then, must still be copied
  // from staging, and the frames after them must not be overwritten by the rest of that piece.
  const std::string key_file = make_key_file("peer-half-frame");
  Rigd a(key_file);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  const std::size_t frame = std::size_t{1} << 20, bytes = 3 * frame;
  const std::uint64_t m = rig::test::make_memory(c, bytes);
  const std::uint64_t image = rig::test::load_program(c, rig::test::test_kernels_bytes());

  rig::remote::WirePart nap;
  nap.kind = rig::remote::WirePart::run;
  nap.image = image;
  nap.entry = "nap";
  nap.args.push_back(rig::remote::WireArg{300'000, 0, 0, 0});  // 300 ms
  rig::remote::Submit run{0, 1, {}};
  run.parts.push_back(nap);
  c.send(run);

  // One copy of all the memory, from (src) or into (dst) it; 0 is the controller's memory.
  const auto copy = [&](std::uint64_t value, std::uint64_t dst, std::uint64_t src) {
    rig::remote::WirePart part;
    part.kind = rig::remote::WirePart::copy;
    part.dst = dst;
    part.src = src;
    part.bytes = bytes;
    rig::remote::Submit submit{0, value, {}};
    submit.parts.push_back(part);
    return submit;
  };
  c.send(copy(2, m, 0));
  const std::vector<std::uint8_t> sent = rig::test::pattern(bytes, 77);
  const auto send_range = [&](std::size_t from, std::size_t n) {
    rig::test::FakeAgent::send_all(
        c.s, std::vector<std::uint8_t>(sent.begin() + from, sent.begin() + from + n));
  };
  // Half of the first frame while the run goes on, the rest once it has ended.
  rig::test::FakeAgent::send_all(c.s, rig::test::bulk_header(rig::remote::Payload::type, frame));
  send_range(0, frame / 2);
  CHECK(rig::test::next_of<rig::remote::Reached>(c).value == 1);
  send_range(frame / 2, frame - frame / 2);
  for (std::size_t at = frame; at < bytes; at += frame) {
    rig::test::FakeAgent::send_all(c.s, rig::test::bulk_header(rig::remote::Payload::type, frame));
    send_range(at, frame);
  }
  CHECK(rig::test::next_of<rig::remote::Reached>(c).value == 2);

  c.send(copy(3, 0, m));
  const std::vector<std::uint8_t> got = rig::test::read_data(c, bytes);
  REQUIRE(got.size() == bytes);
  std::size_t first_wrong = bytes;
  for (std::size_t i = 0; i < bytes; ++i) {
    if (got[i] != sent[i]) {
      first_wrong = i;
      break;
    }
  }
  CHECK_MESSAGE(first_wrong == bytes, "the first wrong byte is at " << first_wrong);
  CHECK(rig::test::next_of<rig::remote::Reached>(c).value == 3);
}

TEST_CASE("a burst of submissions read at once is answered by one REACHED, of the last value") {
  const std::string key_file = make_key_file("peer-burst");
  Rigd a(key_file);
  FakeController c(a.port, load_key(key_file), "me");
  c.start("me");
  // Five empty SUBMITs in one write: the agent reads them at once and answers in one write.
  std::vector<std::uint8_t> burst;
  for (std::uint64_t v = 1; v <= 5; ++v) {
    rig::remote::encode(rig::remote::Submit{0, v, {}}, burst);
  }
  rig::test::FakeAgent::send_all(c.s, burst);
  const auto answer = rig::test::next_of<rig::remote::Reached>(c);
  CHECK(answer.device == 0);
  CHECK(answer.value == 5);
  // And a lone one after it, its own answer.
  c.send(rig::remote::Submit{0, 6, {}});
  CHECK(rig::test::next_of<rig::remote::Reached>(c).value == 6);
}
