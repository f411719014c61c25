// rigd --metrics as an operator's scraper and a hostile client see it: every scrape through a
// whole job (idle, serving, failed, the next job) passes `promtool check metrics` and counts what
// the jobs did; /status says the same in JSON; bad requests get their status; slow clients, huge
// heads and garbage leave the endpoint answering and the agent serving.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "http_get.hpp"
#include "remote/io/address.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "rigd/http.hpp"
#include "support/job_fixtures.hpp"
#include "support/process.hpp"
#include "support/rigd_fixtures.hpp"

using rig::test::load_key;
using rig::test::make_key_file;
using rig::test::RigdProcess;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A copy there and back of 3 MiB and 5 bytes, so that the last bulk frame is a short one; and what
// may ride with it on the connection: the frames' headers (5 bytes a MiB), the copy's messages,
// heartbeats. Generous: only the bytes' own count is exact.
constexpr std::size_t copy_bytes = 3 * 1024 * 1024 + 5;
constexpr std::size_t framing_overhead_bytes_max = 16 * 1024;
constexpr std::size_t rail_bytes = 4096 + 3;

// A scrape takes milliseconds; this bounds only a hang, on a loaded machine.
constexpr int scrape_timeout_ms = 10'000;

// A rigd with --metrics on 127.0.0.1 port 0, and the port its endpoint chose.
struct MetricsRigd : RigdProcess {
  int metrics_port = 0;
  explicit MetricsRigd(std::vector<std::string> args) : RigdProcess(with_metrics(args)) {
    listening();
    const auto line = rig::child::read_line(out, out_buf, 10'000);
    REQUIRE_MESSAGE(line.has_value(), "rigd printed no metrics line");
    REQUIRE(line->starts_with("metrics 127.0.0.1:"));
    auto at = rig::remote::parse_address(line->substr(8));
    REQUIRE_MESSAGE(at.ok(), *line);
    metrics_port = at->port;
  }
  static std::vector<std::string> with_metrics(std::vector<std::string> args) {
    args.insert(args.end(), {"--metrics", "127.0.0.1:0"});
    return args;
  }
};

// `promtool check metrics` on `text`: its exit status and what it said.
std::pair<int, std::string> promtool_check(const std::string& text) {
  const std::string file = std::filesystem::temp_directory_path() /
                           ("rig-metrics-" + std::to_string(getpid()) + ".prom");
  {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  const int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(in >= 0);
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  rig::child::Spec spec;
  const std::string promtool = rig::test::env("RIG_PROMTOOL");
  REQUIRE_MESSAGE(!promtool.empty(),
                  "promtool is missing: tools/deps.sh installs Debian's prometheus");
  spec.argv = {promtool, "check", "metrics"};
  spec.stdin_fd = in;
  spec.stdout_fd = out[1];
  spec.stderr_fd = out[1];
  auto pid = rig::child::spawn(spec);
  ::close(in);
  ::close(out[1]);
  std::filesystem::remove(file);
  REQUIRE_MESSAGE(pid.ok(), (pid.ok() ? "" : pid.error()));
  const std::string said = rig::child::read_all(out[0]);
  ::close(out[0]);
  const int status = rig::child::wait_exit(*pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), said};
}

// GET /metrics, checked by promtool: the text.
std::string scrape(int port) {
  auto r = rig::cli::http_get("127.0.0.1", port, "/metrics", scrape_timeout_ms);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
  REQUIRE(r->status == 200);
  CHECK(r->content_type == "text/plain; version=0.0.4; charset=utf-8");
  const auto [status, said] = promtool_check(r->body);
  INFO(r->body);
  CHECK_MESSAGE(status == 0, "promtool check metrics: " << said);
  return r->body;
}

nlohmann::json status_of(int port) {
  auto r = rig::cli::http_get("127.0.0.1", port, "/status", scrape_timeout_ms);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
  REQUIRE(r->status == 200);
  CHECK(r->content_type == "application/json");
  return nlohmann::json::parse(r->body);
}

// The value of the sample `series` (a name and its labels, as written) in `text`; -1 if absent.
double value(const std::string& text, const std::string& series) {
  const std::string head = "\n" + series + " ";
  const std::size_t at = ("\n" + text).find(head);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + head.size() - 1));
}

// The response to `request` sent as it is.
std::string http_send(int port, const std::string& request) {
  auto r = rig::cli::http_exchange("127.0.0.1", port, request, scrape_timeout_ms);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error()));
  return *r;
}

std::string status_line(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

// Scrapes until `series` reads `expected`, for up to 5 s (the agent counts as it refuses); the
// last value read.
double value_within(int port, const std::string& series, double expected) {
  const auto until = Clock::now() + std::chrono::seconds(5);
  double v = value(scrape(port), series);
  while (v != expected && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    v = value(scrape(port), series);
  }
  return v;
}

// One job on `a`, started and closed in order.
void one_job(const rig::remote::Key& key, const rig::remote::Address& a) {
  auto job = rig::remote::connect(key, {a});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  job->close();
}

}  // namespace

TEST_SUITE("metrics") {
  TEST_CASE(
      "every scrape through idle, serving, a failed job and the next job passes promtool "
      "and counts what the jobs did") {
    const std::string key_file = make_key_file("metrics-whole");
    const auto key = load_key(key_file);
    MetricsRigd a({"--key", key_file, "--test-timing-divisor", "10"});
    REQUIRE(a.err_until("job 1: waiting for a controller").has_value());

    // Idle.
    std::string m = scrape(a.metrics_port);
    CHECK(value(m, "rig_job_serving") == 0);
    CHECK(value(m, "rig_jobs_started_total") == 0);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"closed\"}") == 0);
    CHECK(value(m, "rig_job_processes_started_total") == 1);
    CHECK(m.find("rig_build_info{version=\"") != std::string::npos);
    auto st = status_of(a.metrics_port);
    CHECK(st["state"] == "idle");
    CHECK(st["address"] == rig::remote::address_text("127.0.0.1", a.port));
    CHECK(st["kinds"] == "CPU,SIM");
    CHECK(st["job"].is_null());
    CHECK(st["last"].is_null());
    // The machine's devices, as the daemon's probe found them: those this process finds too.
    {
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (st["devices"].is_null() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        st = status_of(a.metrics_port);
      }
      std::vector<rig::Device> here = rig::open(rig::Kind::cpu);
      for (const rig::Device& d : rig::open(rig::Kind::sim)) here.push_back(d);
      REQUIRE(st["devices"].size() == here.size());
      for (std::size_t i = 0; i < here.size(); ++i) {
        CAPTURE(st["devices"][i].dump());
        CHECK(st["devices"][i]["name"] == here[i].name());
        CHECK(st["devices"][i]["arch"] == here[i].arch());
        CHECK(st["devices"][i]["budget_bytes"] == here[i].budget());
        CHECK(st["devices"][i]["in_use"] == false);
      }
      CHECK(st["device_problems"].empty());
    }

    // Connections that do not prove the key, each counted by why; none is a job.
    {
      auto [wrong, refused] =
          rig::test::dial_as_controller(a.port, load_key(make_key_file("metrics-whole-other")));
      CHECK(refused.why() == "holds another key");
      CHECK(value_within(a.metrics_port, "rig_handshake_failures_total{reason=\"wrong_key\"}", 1) ==
            1);
      const int garbage = rig::test::connect_loopback(a.port);
      const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      REQUIRE(::write(garbage, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
      CHECK(value_within(a.metrics_port, "rig_handshake_failures_total{reason=\"malformed\"}", 1) ==
            1);
      // Silent: refused at the handshake's bound (1 s at this timing divisor).
      const int silent = rig::test::connect_loopback(a.port);
      CHECK(value_within(a.metrics_port, "rig_handshake_failures_total{reason=\"timed_out\"}", 1) ==
            1);
      for (const int s : {wrong, garbage, silent}) ::close(s);
      m = scrape(a.metrics_port);
      CHECK(value(m, "rig_connections_refused_total") == 0);
      CHECK(value(m, "rig_jobs_started_total") == 0);
    }

    // Serving job 1, then closed.
    {
      const auto before_ms = unix_ms();
      auto job = rig::remote::connect(key, {a.address()});
      REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
      REQUIRE(a.err_until("job 1: started by the controller at ").has_value());
      m = scrape(a.metrics_port);
      CHECK(value(m, "rig_job_serving") == 1);
      CHECK(value(m, "rig_jobs_started_total") == 1);
      const double since = value(m, "rig_job_serving_since_seconds");
      CHECK(since * 1000 >= static_cast<double>(before_ms) - 1000);
      CHECK(since * 1000 <= static_cast<double>(unix_ms()) + 1000);
      // Bytes there and back through the agent's host memory: what its connection to the
      // controller carried, each way, is those bytes and little more.
      const auto before = scrape(a.metrics_port);
      std::vector<std::uint8_t> bytes(copy_bytes, 0x5a), back(copy_bytes, 0);
      auto there = rig::Buffer::make(job->hosts().at(0), copy_bytes);
      rig::copy(there, rig::Buffer::borrow(bytes.data(), copy_bytes));
      rig::copy(rig::Buffer::borrow(back.data(), copy_bytes), there).wait();
      REQUIRE(back == bytes);
      m = scrape(a.metrics_port);
      for (const char* way : {"received", "sent"}) {
        CAPTURE(way);
        const std::string series =
            "rig_connection_" + std::string(way) + "_bytes_total{role=\"controller\"}";
        const double moved = value(m, series) - value(before, series);
        CHECK(moved >= static_cast<double>(copy_bytes));
        CHECK(moved <= static_cast<double>(copy_bytes + framing_overhead_bytes_max));
        CHECK(value(m,
                    "rig_connection_" + std::string(way) + "_messages_total{role=\"controller\"}") >
              value(before,
                    "rig_connection_" + std::string(way) + "_messages_total{role=\"controller\"}"));
      }
      CHECK(value(m, "rig_connection_received_bytes_total{role=\"agent\"}") == 0);
      const double age = value(m, "rig_heartbeat_age_seconds{role=\"controller\"}");
      CHECK(age >= 0);
      CHECK(age < 10);
      // A rail from here into the agent's host memory, one round.
      std::vector<std::uint8_t> rail_src(rail_bytes, 0x33);
      auto rail_dst = rig::Buffer::make(job->hosts().at(0), rail_bytes);
      const rig::remote::Transfer t{rig::Buffer::borrow(rail_src.data(), rail_bytes), 0, rail_dst,
                                    0, rail_bytes};
      auto rail = rig::remote::rail(std::span(&t, 1));
      REQUIRE_MESSAGE(rail.ok(), (rail.ok() ? "" : rail.error()));
      rail->wait_arrived(rail->go());
      auto sims = rig::remote::devices(job->hosts().at(0), "SIM");
      REQUIRE_MESSAGE(sims.ok(), (sims.ok() ? "" : sims.error()));
      m = scrape(a.metrics_port);
      // What the agent's work amounted to: the two copies, the buffers it holds, the devices it
      // opened, the rail round that arrived there.
      CHECK(value(m, "rig_submissions_total") - value(before, "rig_submissions_total") == 2);
      CHECK(value(m, "rig_copies_total") - value(before, "rig_copies_total") == 2);
      CHECK(value(m, "rig_copy_bytes_total") - value(before, "rig_copy_bytes_total") ==
            static_cast<double>(2 * copy_bytes));
      CHECK(value(m, "rig_job_memory_bytes") == static_cast<double>(copy_bytes + rail_bytes));
      CHECK(value(m, "rig_job_devices_open") == static_cast<double>(sims->size()));
      CHECK(value(m, "rig_rail_rounds_total{direction=\"arrived\"}") == 1);
      CHECK(value(m, "rig_rail_bytes_total{direction=\"arrived\"}") ==
            static_cast<double>(rail_bytes));
      CHECK(value(m, "rig_rail_rounds_total{direction=\"sent\"}") == 0);
      rail = rig::remote::Rail{};
      st = status_of(a.metrics_port);
      CHECK(st["state"] == "serving");
      CHECK(st["job"]["number"] == 1);
      CHECK(st["job"]["controller"].get<std::string>().starts_with("127.0.0.1:"));
      const std::string host_name = job->hosts().at(0).name();
      CHECK(st["job"]["agents"] == nlohmann::json{host_name.substr(host_name.find('@') + 1)});
      CHECK(st["job"]["memory_bytes"] == copy_bytes + rail_bytes);
      CHECK(st["work"]["copies"] == 2);
      // The job holds the SIM devices it opened, one with a buffer, and the host (the CPU
      // device) with the buffers above: /status says which holds what.
      auto on_sim = rig::Buffer::make(sims->at(0), 4096);
      std::vector<std::uint8_t> few(16, 1);
      rig::copy(on_sim, rig::Buffer::borrow(few.data(), few.size())).wait();
      st = status_of(a.metrics_port);
      CHECK(st["job"]["memory_bytes"] == copy_bytes + rail_bytes + 4096);
      const std::string sim0 = sims->at(0).name().substr(0, sims->at(0).name().find('@'));
      std::size_t in_use = 0;
      for (const auto& d : st["devices"]) {
        CAPTURE(d.dump());
        const std::string name = d["name"];
        CHECK(d["in_use"] == true);
        in_use += d["in_use"] ? 1 : 0;
        const std::size_t held = name == sim0               ? 4096
                                 : name.starts_with("SIM:") ? 0
                                                            : copy_bytes + rail_bytes;
        CHECK(d["memory_bytes"] == held);
      }
      CHECK(in_use == sims->size() + 1);
      job->close();
    }
    REQUIRE(a.err_until("job 1: closed").has_value());
    m = scrape(a.metrics_port);
    CHECK(value(m, "rig_job_serving") == 0);
    CHECK(value(m, "rig_job_serving_since_seconds") == 0);
    CHECK(value(m, "rig_jobs_started_total") == 1);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"closed\"}") == 1);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"failed\"}") == 0);
    // The ended job's traffic stays counted; no heartbeat age without a job.
    CHECK(value(m, "rig_connection_received_bytes_total{role=\"controller\"}") >=
          static_cast<double>(copy_bytes));
    CHECK(value(m, "rig_heartbeat_age_seconds{role=\"controller\"}") == -1);
    // The job's gauges go with it; its counts stay.
    CHECK(value(m, "rig_job_memory_bytes") == 0);
    CHECK(value(m, "rig_job_devices_open") == 0);
    CHECK(value(m, "rig_copies_total") == 3);
    CHECK(value(m, "rig_rail_rounds_total{direction=\"arrived\"}") == 1);
    st = status_of(a.metrics_port);
    CHECK(st["last"]["job"] == 1);
    CHECK(st["last"]["outcome"] == "closed");

    // Job 2: a controller that proves the key, then goes away: one failure, of its kind.
    const int peer = rig::test::prove_as_controller(a.port, key);
    REQUIRE(a.err_until("job 2: started by the controller at ").has_value());
    CHECK(value(scrape(a.metrics_port), "rig_job_serving") == 1);
    ::close(peer);
    REQUIRE(a.err_until("job 2: failed controller: closed its connection").has_value());
    m = scrape(a.metrics_port);
    CHECK(value(m, "rig_jobs_started_total") == 2);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"failed\"}") == 1);
    CHECK(value(m, "rig_job_failures_total{cause=\"connection_closed\"}") == 1);
    for (const char* other : {"silence", "send_stalled", "malformed", "device_lost", "aborted",
                              "exception", "interrupted", "other"}) {
      CAPTURE(other);
      CHECK(value(m, "rig_job_failures_total{cause=\"" + std::string(other) + "\"}") == 0);
    }
    st = status_of(a.metrics_port);
    CHECK(st["state"] == "idle");
    CHECK(st["last"]["job"] == 2);
    CHECK(st["last"]["outcome"] == "failed");
    CHECK(st["last"]["cause"] == "controller: closed its connection");
    CHECK(st["last"]["cause_kind"] == "connection_closed");

    // The next job.
    one_job(key, a.address());
    REQUIRE(a.err_until("job 3: closed").has_value());
    REQUIRE(a.err_until("job 4: waiting for a controller").has_value());
    m = scrape(a.metrics_port);
    CHECK(value(m, "rig_jobs_started_total") == 3);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"closed\"}") == 2);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"failed\"}") == 1);
    CHECK(value(m, "rig_job_processes_started_total") == 4);
    CHECK(status_of(a.metrics_port)["last"]["outcome"] == "closed");
  }

  TEST_CASE(
      "a wrong method, path, a huge head or garbage get their status; a slow client is "
      "dropped within its bound") {
    const std::string key_file = make_key_file("metrics-bad");
    MetricsRigd a({"--key", key_file});
    const int p = a.metrics_port;
    CHECK(status_line(http_send(p, "POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n")) ==
          "HTTP/1.1 405 Method Not Allowed");
    CHECK(status_line(http_send(p, "GET /metricsx HTTP/1.1\r\n\r\n")) == "HTTP/1.1 404 Not Found");
    CHECK(status_line(http_send(p, "GET / HTTP/1.1\r\n\r\n")) == "HTTP/1.1 404 Not Found");
    const std::string huge =
        "GET /metrics HTTP/1.1\r\nCookie: " + std::string(64 * 1024, 'c') + "\r\n\r\n";
    const std::string big = http_send(p, huge);
    CHECK(status_line(big) == "HTTP/1.1 431 Request Header Fields Too Large");
    CHECK(big.ends_with("\r\n\r\nrequest head over 8192 bytes\n"));
    const std::string garbage =
        http_send(p, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\r\n\r\n", 13));
    CHECK(status_line(garbage) == "HTTP/1.1 400 Bad Request");

    // A client that sends half a head and waits: dropped once its time is up, not before.
    const int slow = rig::test::connect_loopback(p);
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: a\r\n";
    REQUIRE(::send(slow, half.data(), half.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(half.size()));
    const auto t0 = Clock::now();
    char buf[64];
    // Meanwhile the endpoint answers others.
    CHECK(value(scrape(p), "rig_job_serving") == 0);
    pollfd pf{slow, POLLIN, 0};
    REQUIRE(::poll(&pf, 1, rig::rigd::http_client_timeout_ms * 3) == 1);
    CHECK(::recv(slow, buf, sizeof buf, 0) == 0);
    const double took_s = rig::test::seconds_since(t0);
    CHECK(took_s >= rig::rigd::http_client_timeout_ms / 1000.0 - 0.5);
    ::close(slow);
  }

  TEST_CASE(
      "a thousand slow clients, huge heads and garbage leave the endpoint answering and "
      "the agent serving jobs") {
    const std::string key_file = make_key_file("metrics-flood");
    const auto key = load_key(key_file);
    MetricsRigd a({"--key", key_file});
    REQUIRE(a.err_until("job 1: waiting for a controller").has_value());
    // A job before the flood, for its time. Each job is timed from its connect to its close, with
    // its job process waiting already (starting one takes a second under a sanitizer).
    auto t0 = Clock::now();
    one_job(key, a.address());
    const double quiet_s = rig::test::seconds_since(t0);
    REQUIRE(a.err_until("job 1: closed").has_value());
    REQUIRE(a.err_until("job 2: waiting for a controller").has_value());

    constexpr int clients = 1000;
    std::vector<int> slow;
    for (int i = 0; i < clients; ++i) {
      const int s = rig::test::connect_loopback(a.metrics_port);
      const std::string part = i % 3 == 0   ? std::string("GET /metr")
                               : i % 3 == 1 ? std::string(4000, 'x')
                                            : std::string();
      if (!part.empty()) (void)::send(s, part.data(), part.size(), MSG_NOSIGNAL);
      slow.push_back(s);
    }
    // Garbage and huge heads among them.
    for (int i = 0; i < 20; ++i) {
      CHECK(status_line(http_send(
                a.metrics_port, "GET /metrics HTTP/1.1\r\nX: " + std::string(20'000, 'y') +
                                    "\r\n\r\n")) == "HTTP/1.1 431 Request Header Fields Too Large");
      CHECK(status_line(http_send(a.metrics_port, "\r\n\r\n\r\n\r\n")) ==
            "HTTP/1.1 400 Bad Request");
    }
    // The endpoint still answers a scraper, and the agent serves jobs as it did.
    {
      const std::string m = scrape(a.metrics_port);
      CHECK(value(m, "rig_jobs_ended_total{outcome=\"closed\"}") == 1);
    }
    double flooded_s = 0;
    for (int j = 2; j < 7; ++j) {
      t0 = Clock::now();
      one_job(key, a.address());
      flooded_s += rig::test::seconds_since(t0) / 5;
      REQUIRE(a.err_until("job " + std::to_string(j) + ": closed").has_value());
      REQUIRE(
          a.err_until("job " + std::to_string(j + 1) + ": waiting for a controller").has_value());
    }
    MESSAGE("a job before the flood: " << quiet_s << " s; during it: " << flooded_s << " s");
    // Only a hang is ruled out here (the machine is loaded): the endpoint is another thread, and
    // the agent another process.
    CHECK(flooded_s < quiet_s * 10 + 2);
    const std::string m = scrape(a.metrics_port);
    CHECK(value(m, "rig_jobs_ended_total{outcome=\"closed\"}") == 6);
    // What rigd holds for them is bounded: it keeps at most http_connections_max of them.
    const long fds =
        std::distance(std::filesystem::directory_iterator("/proc/" + std::to_string(a.pid) + "/fd"),
                      std::filesystem::directory_iterator{});
    CHECK(fds < static_cast<long>(rig::rigd::http_connections_max) + 32);
    for (int s : slow) ::close(s);
  }
}

TEST_SUITE("metrics") {
  TEST_CASE("/status names a kind of --kinds that has no devices, in the opener's words") {
    const std::string key_file = make_key_file("metrics-no-cuda");
    // A driver library that is not there: the CUDA kind opens no device, whatever the machine.
    MetricsRigd a(
        {"--key", key_file, "--kinds", "CPU,CUDA", "--cuda-lib", "/nonexistent/libcuda.so.1"});
    auto st = status_of(a.metrics_port);
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (st["devices"].is_null() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      st = status_of(a.metrics_port);
    }
    INFO(st.dump());
    REQUIRE(st["devices"].size() == 1);
    CHECK(st["devices"][0]["name"] == rig::host().name());
    CHECK(st["device_problems"] == nlohmann::json{"this machine has no CUDA devices"});
  }

  TEST_CASE("--metrics: a bad address or --once is a usage error (2); a port in use fails (1)") {
    const std::string key_file = make_key_file("metrics-usage");
    auto exit_of = [](RigdProcess& p) {
      const auto status = p.wait_for(10'000);
      REQUIRE(status.has_value());
      return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
    };
    {
      RigdProcess p({"--key", key_file, "--metrics", "nowhere"});
      CHECK(exit_of(p) == 2);
      CHECK(p.err_until("--metrics takes HOST:PORT, not 'nowhere'").has_value());
    }
    {
      RigdProcess p({"--key", key_file, "--once", "--metrics", "127.0.0.1:0"});
      CHECK(exit_of(p) == 2);
      CHECK(
          p.err_until("--metrics is served by the daemon, which --once does not run").has_value());
    }
    {
      MetricsRigd first({"--key", key_file});
      const std::string taken = "127.0.0.1:" + std::to_string(first.metrics_port);
      RigdProcess second({"--key", key_file, "--metrics", taken});
      CHECK(exit_of(second) == 1);
      CHECK(second.err_until("cannot serve metrics at " + taken + ": Address already in use")
                .has_value());
      // The first still answers.
      CHECK(value(scrape(first.metrics_port), "rig_job_serving") == 0);
    }
  }
}
