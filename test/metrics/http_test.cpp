// rigd's request parser (tools/rigd/http.*) and the classifier of root causes (metrics.*): what a
// request's bytes, cut anywhere, parse to; which status a bad one gets; and which kind each root
// cause the remote layer makes is counted as. And /status's devices: the probe's lines as the
// daemon reads them (device_probe.*), and what a job holds of each device, from its page.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/job/work_counters.hpp"
#include "rigd/device_probe.hpp"
#include "rigd/http.hpp"
#include "rigd/metrics.hpp"

using rig::rigd::CauseKind;
using rig::rigd::classify_cause;
using rig::rigd::HttpRequestParser;
using State = HttpRequestParser::State;

namespace {

// Feeds `text` in pieces of `piece` bytes; the parser's state after the last.
State feed_in_pieces(HttpRequestParser& p, const std::string& text, std::size_t piece) {
  State s = State::incomplete;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(text.data()) + at;
    s = p.feed({bytes, std::min(piece, text.size() - at)});
  }
  return s;
}

}  // namespace

TEST_SUITE("metrics") {
  TEST_CASE("a request's head parses the same however its bytes are cut") {
    const std::string head =
        "GET /metrics?x=1 HTTP/1.1\r\nHost: 10.0.0.2:9100\r\nUser-Agent: Prometheus/2.42\r\n"
        "Accept: text/plain\r\n\r\nBODY IGNORED";
    for (std::size_t piece : {1u, 2u, 3u, 7u, 64u, 4096u}) {
      CAPTURE(piece);
      HttpRequestParser p;
      REQUIRE(feed_in_pieces(p, head, piece) == State::done);
      CHECK(p.request().method == "GET");
      CHECK(p.request().target == "/metrics?x=1");
    }
    HttpRequestParser lf;
    CHECK(feed_in_pieces(lf, "GET /status HTTP/1.0\nHost: a\n\n", 5) == State::done);
    CHECK(lf.request().target == "/status");
  }

  TEST_CASE("an unfinished head is incomplete; one over the bound is 431, at any cut") {
    HttpRequestParser p;
    CHECK(feed_in_pieces(p, "GET /metrics HTTP/1.1\r\nHost: a\r\n", 4) == State::incomplete);
    const std::string huge =
        "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(rig::rigd::http_head_bytes_max, 'a');
    for (std::size_t piece : {1000u, 8192u, 100000u}) {
      HttpRequestParser q;
      REQUIRE(feed_in_pieces(q, huge, piece) == State::bad);
      CHECK(q.status() == 431);
      CHECK(q.why() == "request head over 8192 bytes");
      // Bad stays bad: more bytes change nothing.
      CHECK(feed_in_pieces(q, "\r\n\r\n", 1) == State::bad);
    }
    // At the bound exactly, a head is still read.
    std::string at_bound = "GET / HTTP/1.1\r\nX: ";
    at_bound += std::string(rig::rigd::http_head_bytes_max - at_bound.size() - 4, 'b') + "\r\n\r\n";
    REQUIRE(at_bound.size() == rig::rigd::http_head_bytes_max);
    HttpRequestParser r;
    CHECK(feed_in_pieces(r, at_bound, 100) == State::done);
  }

  TEST_CASE("malformed heads get 400 (505 for another major version), naming the rule") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"GET /metrics\r\n\r\n", "the request line is not METHOD TARGET VERSION"},
        {"GET  /metrics HTTP/1.1\r\n\r\n", "the request line is not METHOD TARGET VERSION"},
        {"GET /a b HTTP/1.1\r\n\r\n", "the request line is not METHOD TARGET VERSION"},
        {"G(T /metrics HTTP/1.1\r\n\r\n", "the method is not a token"},
        {"GET /\x01 HTTP/1.1\r\n\r\n", "the target is empty or holds a space or control character"},
        {"GET / HTTX/1.1\r\n\r\n", "the version is not HTTP/D.D"},
        {"GET / HTTP/1.1\r\nno colon\r\n\r\n", "a header line is not NAME: VALUE"},
        {"GET / HTTP/1.1\r\n folded: x\r\n\r\n", "a header line is not NAME: VALUE"},
        {"GET / HTTP/1.1\r\nX: a\x1b[31m\r\n\r\n", "a header holds a control character"},
    };
    for (const auto& [text, why] : cases) {
      CAPTURE(text);
      HttpRequestParser p;
      REQUIRE(feed_in_pieces(p, text, 3) == State::bad);
      CHECK(p.status() == 400);
      CHECK(p.why() == why);
    }
    HttpRequestParser two;
    REQUIRE(feed_in_pieces(two, "GET / HTTP/2.0\r\n\r\n", 3) == State::bad);
    CHECK(two.status() == 505);
  }

  TEST_CASE("a response names its status, length and close") {
    CHECK(rig::rigd::http_response(404, "text/plain", "no\n") ==
          "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
          "Connection: close\r\n\r\nno\n");
    CHECK(rig::rigd::http_response(405, "text/plain", "").find("\r\nAllow: GET\r\n") !=
          std::string::npos);
  }

  TEST_CASE("root causes, as the remote layer words them, are counted by kind") {
    CHECK(classify_cause("interrupted") == CauseKind::interrupted);
    CHECK(classify_cause("controller: closed its connection") == CauseKind::connection_closed);
    CHECK(classify_cause("10.0.0.3:41234#2: connection failed: connection timed out") ==
          CauseKind::connection_closed);
    CHECK(classify_cause("controller: sent nothing for 10 s") == CauseKind::silence);
    CHECK(classify_cause("controller: sent nothing for 1 s, while this process itself was not "
                         "running for 0.5 s") == CauseKind::silence);
    CHECK(classify_cause("controller: a send made no progress for 10 s") ==
          CauseKind::send_stalled);
    CHECK(classify_cause("controller: malformed message: JOIN twice") == CauseKind::malformed);
    CHECK(classify_cause("malformed message: unknown type 0x7f") == CauseKind::malformed);
    CHECK(classify_cause("controller aborted: SIM:0: kernel faulted") == CauseKind::aborted);
    CHECK(classify_cause("unknown exception") == CauseKind::exception);
    CHECK(classify_cause("process ended by signal 9 (Killed)") == CauseKind::other);
    // An abort's reason is the peer's text: it cannot pass for another kind.
    CHECK(classify_cause("controller aborted: x: sent nothing for 10 s") == CauseKind::aborted);
    CHECK(classify_cause("controller aborted: interrupted") == CauseKind::aborted);
    CHECK(rig::rigd::cause_label(CauseKind::send_stalled) == "send_stalled");
  }

  TEST_CASE("a failure the job process marks as a device's loss counts as device_lost") {
    // A device's loss is worded by its driver, so only the job process's mark makes it one.
    rig::rigd::JobPage page;
    rig::rigd::Metrics metrics({}, &page);
    metrics.job_process_started(1);
    page.start("127.0.0.1:5000", 1);
    page.work.device_lost.store(1);
    metrics.job_process_ended(1, "failed SIM:0: the simulated device failed", "");
    metrics.job_process_started(2);
    page.start("127.0.0.1:5000", 2);
    metrics.job_process_ended(2, "failed SIM:0: the simulated device failed", "");
    const std::string text = metrics.prometheus_text();
    CHECK(text.find("rig_job_failures_total{cause=\"device_lost\"} 1\n") != std::string::npos);
    CHECK(text.find("rig_job_failures_total{cause=\"other\"} 1\n") != std::string::npos);
    // A cause of a kind of its own keeps it, mark or not: the first cause was not the device.
    metrics.job_process_started(3);
    page.start("127.0.0.1:5000", 3);
    page.work.device_lost.store(1);
    metrics.job_process_ended(3, "failed controller: closed its connection", "");
    CHECK(metrics.prometheus_text().find(
              "rig_job_failures_total{cause=\"connection_closed\"} 1\n") != std::string::npos);
  }

  TEST_CASE("the device probe's lines: devices and problems read, anything else dropped") {
    using rig::rigd::parse_probe_line;
    auto d = parse_probe_line("device\tSIM:1\tsim\t1073741824");
    REQUIRE(d.device.has_value());
    CHECK(d.device->name == "SIM:1");
    CHECK(d.device->arch == "sim");
    CHECK(d.device->budget_bytes == 1073741824);
    CHECK_FALSE(d.problem.has_value());
    auto p = parse_probe_line("problem\tthis machine has no CUDA devices");
    REQUIRE(p.problem.has_value());
    CHECK(*p.problem == "this machine has no CUDA devices");
    CHECK_FALSE(p.device.has_value());
    // Bytes that are not printable are escaped, whoever wrote them.
    CHECK(parse_probe_line("problem\tCUDA: \x1b[2J").problem == "CUDA: \\x1b[2J");
    for (const char* bad :
         {"", "device", "device\tSIM:0\tsim", "device\tSIM:0\tsim\t12x", "device\tSIM:0\tsim\t-1",
          "device\t\tsim\t1", "device\tSIM:0\tsim\t1\textra", "device\tSIM:0\tsim\t",
          "device\tSIM:0\tsim\t99999999999999999999999", "problem\t", "other\tSIM:0\tsim\t1"}) {
      CAPTURE(bad);
      const auto l = parse_probe_line(bad);
      CHECK_FALSE(l.device.has_value());
      CHECK_FALSE(l.problem.has_value());
    }
  }

  TEST_CASE("/status lists the probed devices with what the job holds of each, and its agents") {
    rig::rigd::JobPage page;
    rig::rigd::Metrics metrics({}, &page);
    auto status = [&] { return nlohmann::json::parse(metrics.status_json()); };
    CHECK(status()["devices"].is_null());  // the probe has not ended
    metrics.devices_probed({{{"SIM:0", "sim", 1u << 30}, {"SIM:1", "sim", 2u << 30}},
                            {"this machine has no CUDA devices"}});
    auto st = status();
    REQUIRE(st["devices"].size() == 2);
    CHECK(st["devices"][1] == nlohmann::json{{"name", "SIM:1"},
                                             {"arch", "sim"},
                                             {"budget_bytes", 2u << 30},
                                             {"in_use", false},
                                             {"memory_bytes", 0}});
    CHECK(st["device_problems"] == nlohmann::json{"this machine has no CUDA devices"});

    metrics.job_process_started(1);
    rig::remote::set_work_counters(&page.work);
    page.start("127.0.0.1:5000", 1);
    page.set_agents({"a", "b\\x01", "c"});
    rig::remote::WorkCounters::device_opened("SIM:1");
    rig::remote::WorkCounters::memory_made("SIM:1", 4096);
    rig::remote::WorkCounters::memory_made("CPU", 100);  // not probed: in the total only
    st = status();
    CHECK(st["job"]["agents"] == nlohmann::json{"a", "b\\x01", "c"});
    CHECK(st["job"]["memory_bytes"] == 4196);
    CHECK(st["job"]["devices_open"] == 1);
    CHECK(st["devices"][0]["in_use"] == false);
    CHECK(st["devices"][1]["in_use"] == true);
    CHECK(st["devices"][1]["memory_bytes"] == 4096);
    rig::remote::WorkCounters::memory_freed("SIM:1", 4096);
    st = status();
    CHECK(st["devices"][1]["in_use"] == true);
    CHECK(st["devices"][1]["memory_bytes"] == 0);
    CHECK(st["job"]["memory_bytes"] == 100);
    // More devices than the page has slots for: counted in the totals, the first ones kept.
    for (std::size_t i = 0; i < rig::remote::work_devices_max + 8; ++i) {
      rig::remote::WorkCounters::memory_made("SIM:" + std::to_string(100 + i), 1);
    }
    CHECK(status()["job"]["memory_bytes"] == 100 + rig::remote::work_devices_max + 8);
    CHECK(status()["devices"][1]["in_use"] == true);
    rig::remote::set_work_counters(nullptr);
    metrics.job_process_ended(1, "closed", "");
    st = status();
    CHECK(st["job"].is_null());
    CHECK(st["devices"][1]["in_use"] == false);
    CHECK(st["devices"][1]["memory_bytes"] == 0);
  }
}
