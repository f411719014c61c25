// Peers that speak rig's protocol by hand on raw loopback sockets, for the fault tests: a fake
// agent that proves the key, a fake controller that dials one, frame readers, an orderly end,
// another process's socket taken over, and a peer that stops reading while the controller sends
// (the send-progress rule).
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote/io/address.hpp"
#include "remote/trust/handshake.hpp"
#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"

namespace rig::test {

// A TCP listener on 127.0.0.1, port 0, that plays an agent by hand.
struct FakeAgent {
  int fd = -1;
  int port = 0;
  FakeAgent() {
    // A port no agent of this binary had (port_seen_before says why): the ones the kernel repeats
    // stay bound until a new one comes, so that it cannot hand them out again meanwhile.
    std::vector<int> repeated;
    for (;;) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      REQUIRE(fd >= 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
      socklen_t len = sizeof a;
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      port = ntohs(a.sin_port);
      if (!port_seen_before(port) || repeated.size() >= 64) break;
      repeated.push_back(fd);
    }
    for (const int r : repeated) ::close(r);
    REQUIRE(::listen(fd, 4) == 0);
  }
  ~FakeAgent() { ::close(fd); }
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;
  std::string name() const { return rig::remote::address_text("127.0.0.1", port); }

  // Accepts one connection and proves `key` to it as an agent would; returns the socket.
  int accept_and_prove(const rig::remote::Key& key) {
    const int c = ::accept(fd, nullptr, nullptr);
    REQUIRE(c >= 0);
    auto hs = rig::remote::Handshake::listener(key, {rig::remote::new_instance_id()});
    send_all(c, hs.take_output());
    std::uint8_t buf[4096];
    while (!hs.done()) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      REQUIRE(n > 0);
      hs.feed({buf, static_cast<std::size_t>(n)});
      if (hs.state() == rig::remote::Handshake::State::verified) hs.admit(std::nullopt);
      send_all(c, hs.take_output());
    }
    REQUIRE(hs.state() == rig::remote::Handshake::State::proven);
    return c;
  }
  static void send_all(int c, const std::vector<std::uint8_t>& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(c, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      off += static_cast<std::size_t>(n);
    }
  }
};

// Hands each frame read from raw socket `s` (through `d`, which keeps what was read past it) to
// `on_frame` until it returns true: then true; false if the connection ended, was reset or sent
// bytes that do not frame, or if `ms` (when not negative) passed first.
template <typename F>
bool walk_frames(int s, rig::remote::FrameDecoder& d, F&& on_frame, int ms = -1) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    auto f = d.next();
    if (!f) return false;
    if (f->has_value()) {
      if (on_frame(**f)) return true;
      continue;
    }
    if (ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            until - std::chrono::steady_clock::now())
                            .count();
      pollfd p{s, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) != 1) return false;
    }
    std::uint8_t buf[64 * 1024];
    const ssize_t n = ::read(s, buf, sizeof buf);
    if (n <= 0) return false;
    d.feed({buf, static_cast<std::size_t>(n)});
  }
}

// A controller played by hand: dials an agent at 127.0.0.1:port and proves `key` to it, naming the
// agent `agent_name` (any bytes, as a hostile controller may). Owner: the test; one thread.
struct FakeController {
  int s = -1;
  rig::remote::FrameDecoder d;  // what came after the handshake

  FakeController(int port, const rig::remote::Key& key, const std::string& agent_name) {
    s = connect_loopback(port);
    auto hs = rig::remote::Handshake::dialer(
        key, {rig::remote::Role::controller, "controller", rig::remote::new_job_id(), agent_name,
              rig::remote::new_instance_id()});
    std::uint8_t buf[4096];
    while (!hs.done()) {
      const ssize_t n = ::read(s, buf, sizeof buf);
      REQUIRE(n > 0);
      const std::size_t took = hs.feed({buf, static_cast<std::size_t>(n)});
      FakeAgent::send_all(s, hs.take_output());
      if (took < static_cast<std::size_t>(n)) d.feed({buf + took, n - took});
    }
    REQUIRE_MESSAGE(hs.state() == rig::remote::Handshake::State::proven, hs.why());
  }
  ~FakeController() {
    if (s >= 0) ::close(s);
  }
  FakeController(const FakeController&) = delete;
  FakeController& operator=(const FakeController&) = delete;

  void send(const rig::remote::Message& m) {
    std::vector<std::uint8_t> bytes;
    rig::remote::encode(m, bytes);
    FakeAgent::send_all(s, bytes);
  }
  // The next message but heartbeats within `ms`, or nothing if the connection ended or none came.
  std::optional<rig::remote::Message> next(int ms = 10'000) {
    std::optional<rig::remote::Message> got;
    walk_frames(
        s, d,
        [&](const auto& frame) {
          auto m = rig::remote::decode(frame);
          if (!m) return true;
          if (!std::holds_alternative<rig::remote::Heartbeat>(*m)) got = std::move(*m);
          return got.has_value();
        },
        ms);
    return got;
  }
  // JOIN as the job's one agent, named as in the handshake, and the agent's READY.
  void start(const std::string& agent_name) {
    send(rig::remote::Join{agent_name, {agent_name}, {"127.0.0.1:1"}});
    auto ready = next();
    REQUIRE(ready.has_value());
    REQUIRE(std::holds_alternative<rig::remote::Ready>(*ready));
  }
};

// The next message of type M from the agent, skipping others but an ABORT, which fails the test.
template <typename M>
M next_of(FakeController& c) {
  for (;;) {
    auto m = c.next();
    REQUIRE(m.has_value());
    if (auto* abort = std::get_if<rig::remote::Abort>(&*m))
      FAIL("the agent aborted: " << abort->reason);
    if (auto* got = std::get_if<M>(&*m)) return *got;
  }
}

// `bytes` of the agent's host memory: its id.
inline std::uint64_t make_memory(FakeController& c, std::uint64_t bytes) {
  c.send(rig::remote::Make{0, bytes});
  const rig::remote::Made made = next_of<rig::remote::Made>(c);
  REQUIRE_MESSAGE(made.memory != 0, made.why);
  return made.memory;
}

// A bulk frame's header: `bytes` of type `type` follow it.
inline std::vector<std::uint8_t> bulk_header(std::uint8_t type, std::size_t bytes) {
  std::vector<std::uint8_t> header(rig::remote::frame_header_bytes);
  rig::remote::write_frame_header(std::span<std::uint8_t, rig::remote::frame_header_bytes>(header),
                                  type, bytes);
  return header;
}

// A program LOADed by hand, its bytes in one PAYLOAD: the image's id.
inline std::uint64_t load_program(FakeController& c, const std::vector<std::byte>& program) {
  c.send(rig::remote::Load{0, program.size()});
  FakeAgent::send_all(c.s, bulk_header(rig::remote::Payload::type, program.size()));
  const auto* at = reinterpret_cast<const std::uint8_t*>(program.data());
  FakeAgent::send_all(c.s, std::vector<std::uint8_t>(at, at + program.size()));
  const rig::remote::Loaded loaded = next_of<rig::remote::Loaded>(c);
  REQUIRE_MESSAGE(loaded.image != 0, loaded.why);
  return loaded.image;
}

// The bodies of the agent's next DATA frames, `bytes` in all (heartbeats skipped; any other frame
// fails the test).
inline std::vector<std::uint8_t> read_data(FakeController& c, std::size_t bytes) {
  std::vector<std::uint8_t> out;
  std::string other;  // the first frame that was neither DATA nor a heartbeat
  const auto take = [&](const auto& frame) {
    if (frame.type == rig::remote::Data::type) {
      out.insert(out.end(), frame.body.begin(), frame.body.end());
      return out.size() >= bytes;
    }
    auto m = rig::remote::decode(frame);
    if (m && std::holds_alternative<rig::remote::Heartbeat>(*m)) return false;
    other = m ? std::string(std::visit([](const auto& x) { return x.name; }, *m)) : "a bad frame";
    return true;
  };
  const bool whole = bytes == 0 || walk_frames(c.s, c.d, take, 10'000);
  REQUIRE_MESSAGE(whole,
                  "no DATA within 10 s, or the connection ended, after " << out.size() << " bytes");
  REQUIRE_MESSAGE(other.empty(), other << " where DATA was due");
  return out;
}

// Reads frames until a message of type `M` arrives, skipping others: that message, or nothing if
// the connection ended or sent what does not decode first.
template <typename M>
std::optional<M> read_message(int s, rig::remote::FrameDecoder& d) {
  std::optional<M> got;
  walk_frames(s, d, [&](const auto& frame) {
    auto m = rig::remote::decode(frame);
    if (!m) return true;
    if (auto* one = std::get_if<M>(&*m)) got = std::move(*one);
    return got.has_value();
  });
  return got;
}

// Reads frames until one of type `M` arrives (skipping others, heartbeats and bulk frames too).
template <typename M>
bool read_until(int s, rig::remote::FrameDecoder& d) {
  return walk_frames(s, d, [](const auto& frame) {
    auto m = rig::remote::decode(frame);
    return m && std::holds_alternative<M>(*m);
  });
}

inline void send_message(int s, const rig::remote::Message& m) {
  std::vector<std::uint8_t> bytes;
  rig::remote::encode(m, bytes);
  FakeAgent::send_all(s, bytes);
}

// Accepts one controller at `agent`, proves `key` to it, reads its JOIN and answers READY as an
// x86_64 host of `budget_bytes`: a job whose one agent is this fake has started. Returns the
// socket; `d` holds what was read past the JOIN.
inline int accept_job(FakeAgent& agent, const rig::remote::Key& key, rig::remote::FrameDecoder& d,
                      std::uint64_t budget_bytes = 1 << 20) {
  const int s = agent.accept_and_prove(key);
  REQUIRE(read_until<rig::remote::Join>(s, d));
  send_message(s, rig::remote::Ready{"x86_64", budget_bytes});
  return s;
}

// Reads frames until an ABORT arrives, counting the frames of type `M` before it (a message, or a
// bulk frame such as PAYLOAD, which is counted undecoded). Returns the abort's reason, or nothing
// if the connection ended (or was reset) first.
template <typename M>
std::optional<std::string> read_abort(int s, rig::remote::FrameDecoder& d, long& counted) {
  std::optional<std::string> reason;
  walk_frames(s, d, [&](const auto& frame) {
    if (frame.type == M::type) {
      ++counted;
      return false;
    }
    auto m = rig::remote::decode(frame);
    if (!m) return true;
    if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) reason = abort->reason;
    return reason.has_value();
  });
  return reason;
}

// Like read_abort, noting the value of the last REACHED before the ABORT (0 if none came).
inline std::optional<std::string> read_abort_after_reached(int s, rig::remote::FrameDecoder& d,
                                                           std::uint64_t& last_value) {
  last_value = 0;
  std::optional<std::string> reason;
  walk_frames(s, d, [&](const auto& frame) {
    auto m = rig::remote::decode(frame);
    if (!m) return true;
    if (auto* r = std::get_if<rig::remote::Reached>(&*m)) last_value = r->value;
    if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) reason = abort->reason;
    return reason.has_value();
  });
  return reason;
}

// Ends our side, then reads to the peer's end: 0 for its orderly end, -1 for a reset.
inline ssize_t end_and_drain(int s) {
  ::shutdown(s, SHUT_WR);
  std::uint8_t buf[64 * 1024];
  ssize_t n;
  while ((n = ::read(s, buf, sizeof buf)) > 0) {
  }
  ::close(s);
  return n;
}

// A duplicate, in this process, of process `pid`'s TCP socket connected to 127.0.0.1:peer_port
// (pidfd_getfd; `pid` must be a descendant of this process or otherwise ours to trace), or -1.
// While this process holds it, the socket outlives `pid`: its death sends no FIN on it.
inline int take_socket(pid_t pid, int peer_port) {
  // Through syscall(): glibc 2.36's <sys/pidfd.h> declares its wrappers without C linkage.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  int found = -1;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    const int target = std::stoi(e.path().filename().string());
    // The duplicate is close-on-exec, as pidfd_getfd always makes it.
    const int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, target, 0));
    if (fd < 0) continue;
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    struct stat st {};
    if (found < 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 &&
        peer.sin_family == AF_INET && ntohs(peer.sin_port) == peer_port) {
      found = fd;
      continue;
    }
    ::close(fd);
  }
  ::close(pidfd);
  return found;
}

// How a send that stopped making progress was seen from both ends. Times are in seconds from the
// first submission.
struct SendStall {
  std::optional<std::string> cause;  // the controller's root cause
  std::string agent_name;            // the peer's name, as the cause gives it
  double detected_s = 0;             // when the test saw the failure (late by its polling only)
  // The peer's kernel accepted its last byte (its receive queue last grew) after
  // `before_last_byte_s` (the poll before the one that saw it) and by `last_byte_s`. The
  // controller's stall clock can only start after the acknowledgement of that byte.
  double before_last_byte_s = 0;
  double last_byte_s = 0;
  long queued_bytes = 0;  // what the peer's kernel holds unread at the end
};

// A fake agent that joins a job of this process's, then stops reading (alive: it sends heartbeats)
// while the controller submits to its host until the kernel's buffers on both ends are full and
// more waits in the controller's own queue; then waits up to `limit_s` for the job to fail.
// `receive_bytes` sets the peer's receive buffer (0: the system's default). The caller sets the
// job's timing.
inline SendStall stall_a_send(const rig::remote::Key& key, int receive_bytes, double limit_s) {
  using clock = std::chrono::steady_clock;
  FakeAgent agent;
  if (receive_bytes > 0) {
    // Accepted sockets inherit the listener's buffer size and segment size.
    small_window(agent.fd, receive_bytes);
  }
  std::atomic<bool> done{false};
  std::atomic<clock::rep> last_growth{0}, before_last_growth{0};  // clock's ticks since its epoch
  std::atomic<long> queued{0};
  std::atomic<int> window_bytes{0};  // what the peer's receive buffer holds at most
  std::thread fake([&] {
    const int s = agent.accept_and_prove(key);
    int rcvbuf = 0;
    socklen_t len = sizeof rcvbuf;
    getsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len);
    window_bytes = rcvbuf;
    rig::remote::FrameDecoder d;
    REQUIRE(read_until<rig::remote::Join>(s, d));
    send_message(s, rig::remote::Ready{"x86_64", 1 << 20});
    // Alive (a heartbeat every 50 ms) but reading nothing more. Every 2 ms it looks at how many
    // bytes its kernel holds: the last growth is the last byte the controller's kernel sees
    // acknowledged. A growth first seen by one look came after the clock reading taken just
    // before the look ahead of it (`previous`), and before the reading just after this one.
    auto previous = clock::now();
    auto heartbeat = previous;
    int last = -1;
    while (!done.load()) {
      const auto before = clock::now();
      int n = 0;
      const bool known = ioctl(s, FIONREAD, &n) == 0;
      const auto now = clock::now();
      if (known && n != last) {
        last = n;
        queued = n;
        before_last_growth = previous.time_since_epoch().count();
        last_growth = now.time_since_epoch().count();
      }
      previous = before;
      if (now - heartbeat >= std::chrono::milliseconds(50)) {
        heartbeat = now;
        std::vector<std::uint8_t> bytes;
        rig::remote::encode(rig::remote::Heartbeat{}, bytes);
        if (::send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL) <= 0) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::close(s);  // over unread bytes: a reset, which ends the controller's drain at once
  });
  SendStall out;
  out.agent_name = agent.name();
  auto job = rig::remote::connect(key, {{"127.0.0.1", agent.port}});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  const rig::Device host = job->hosts()[0];
  // Enough bytes to fill the peer's receive buffer and the most the controller's send buffer can
  // grow to (tcp_wmem's maximum), so that the rest waits in the controller's own queue.
  long send_buffer_max = 32l << 20;
  {
    std::ifstream f("/proc/sys/net/ipv4/tcp_wmem");
    long lo = 0, mid = 0, hi = 0;
    if (f >> lo >> mid >> hi) send_buffer_max = hi;
  }
  std::vector<std::uint8_t> one;
  rig::remote::encode(rig::remote::Submit{0, 1, {}}, one);
  const auto t0 = clock::now();
  auto since_t0 = [t0](clock::rep ticks) {
    return std::chrono::duration<double>(clock::time_point(clock::duration(ticks)) - t0).count();
  };
  long submitted_bytes = 0;
  // Submits until that many bytes have gone and the peer's queue has stopped growing for 300 ms,
  // or until the job fails (a submission then raises Lost), which with a small send buffer may
  // come first.
  try {
    while (!job->failed() && seconds_since(t0) < limit_s) {
      for (int i = 0; i < 1000; ++i) (void)rig::submit(host, std::span<const rig::Part>{});
      submitted_bytes += 1000 * static_cast<long>(one.size());
      if (submitted_bytes > send_buffer_max + window_bytes.load() + (1l << 20) &&
          last_growth.load() != 0 && seconds_since(t0) - since_t0(last_growth.load()) > 0.3) {
        break;
      }
    }
  } catch (const rig::Lost&) {
  }
  out.cause = wait_for_failure(*job, t0, limit_s);
  out.detected_s = seconds_since(t0);
  done = true;
  job->close();
  fake.join();
  out.before_last_byte_s = since_t0(before_last_growth.load());
  out.last_byte_s = since_t0(last_growth.load());
  out.queued_bytes = queued.load();
  MESSAGE("send stall: peer's last byte after "
          << out.before_last_byte_s << " s, by " << out.last_byte_s << " s (" << out.queued_bytes
          << " bytes unread), failure seen at " << out.detected_s << " s");
  return out;
}

// How a job's start went when one agent's connection to another hung.
struct HungJoin {
  std::string error;                         // connect's
  double took_s = 0;                         // how long connect took
  std::optional<std::string> abort_to_fake;  // the abort the controller sent the fake agent
  std::string fake_name;
};

// Starts a job of this process with the agent at `a` and, after it, a fake agent that proves the
// controller's connection and takes its JOIN, then leaves a's connection to it unanswered (it
// accepts it and says nothing) while it keeps its own connection to the controller alive with
// heartbeats, until the controller's abort comes. The caller sets the job's timing.
inline HungJoin hang_a_join(const rig::remote::Key& key, const rig::remote::Address& a) {
  FakeAgent b;
  HungJoin out;
  out.fake_name = b.name();
  std::thread fake([&] {
    const int s = b.accept_and_prove(key);
    rig::remote::FrameDecoder d;
    REQUIRE(read_until<rig::remote::Join>(s, d));
    const int from_a = ::accept(b.fd, nullptr, nullptr);
    while (!out.abort_to_fake) {
      pollfd p{s, POLLIN, 0};
      if (::poll(&p, 1, 20) == 0) {
        send_message(s, rig::remote::Heartbeat{});
        continue;
      }
      std::uint8_t buf[4096];
      const ssize_t n = ::read(s, buf, sizeof buf);
      if (n <= 0) break;
      d.feed({buf, static_cast<std::size_t>(n)});
      while (auto f = d.next()) {
        if (!f->has_value()) break;
        auto m = rig::remote::decode(**f);
        if (!m) break;
        if (auto* abort = std::get_if<rig::remote::Abort>(&*m)) out.abort_to_fake = abort->reason;
      }
    }
    ::close(from_a);
    end_and_drain(s);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto job = rig::remote::connect(key, {a, {"127.0.0.1", b.port}});
  out.took_s = seconds_since(t0);
  fake.join();
  REQUIRE_FALSE(job.ok());
  out.error = job.error();
  return out;
}

}  // namespace rig::test
