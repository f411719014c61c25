// The real Prometheus server (Debian's prometheus) scraping a rigd through a job: the scrape is
// up, and the counters it stored are what the job did. Slow suite: the server takes seconds to
// start and scrapes once a second.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "http_get.hpp"
#include "remote/io/address.hpp"
#include "rig/remote.hpp"
#include "support/job_fixtures.hpp"
#include "support/process.hpp"
#include "support/rigd_fixtures.hpp"

using rig::test::load_key;
using rig::test::make_key_file;
using rig::test::RigdProcess;

namespace {

// The server's start, its first scrapes and a query: seconds; this bounds a hang only.
constexpr double prometheus_wait_s = 60;

// A port that was free a moment ago: Prometheus's web listener takes no port 0 it would report.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(s);
  return ntohs(a.sin_port);
}

// The value of the instant query `q` at the server on `port`, as text; empty if it has none yet.
std::string query(int port, const std::string& q) {
  auto r = rig::cli::http_get("127.0.0.1", port, "/api/v1/query?query=" + q, 5'000);
  if (!r || r->status != 200) return {};
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j["status"] != "success" || j["data"]["result"].empty()) return {};
  return j["data"]["result"][0]["value"][1].get<std::string>();
}

// Polls `q` until it reads `want` or the bound passes; the last value read.
std::string wait_for_value(int port, const std::string& q, const std::string& want) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string got;
  while ((got = query(port, q)) != want && rig::test::seconds_since(t0) < prometheus_wait_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return got;
}

}  // namespace

TEST_SUITE("metrics slow") {
  TEST_CASE("the Prometheus server scrapes rigd through a job: up, and the job counted") {
    const std::string prometheus = rig::test::env("RIG_PROMETHEUS");
    REQUIRE_MESSAGE(!prometheus.empty(),
                    "prometheus is missing: tools/deps.sh installs Debian's prometheus");
    const std::string key_file = make_key_file("metrics-prometheus");
    RigdProcess a({"--key", key_file, "--metrics", "127.0.0.1:0"});
    a.listening();
    const auto line = rig::child::read_line(a.out, a.out_buf, 10'000);
    REQUIRE(line.has_value());
    const std::string target = line->substr(8);

    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("rig-prometheus-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    struct Remove {
      fs::path p;
      ~Remove() {
        std::error_code ignored;
        fs::remove_all(p, ignored);
      }
    } remove{dir};
    std::ofstream(dir / "prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        << "scrape_configs:\n  - job_name: rigd\n    static_configs:\n      - targets: ['" << target
        << "']\n";
    const int web = free_port();
    rig::test::Process server({prometheus, "--config.file=" + (dir / "prometheus.yml").string(),
                               "--storage.tsdb.path=" + (dir / "data").string(),
                               "--web.listen-address=127.0.0.1:" + std::to_string(web)});

    CHECK(wait_for_value(web, "up", "1") == "1");
    CHECK(wait_for_value(web, "rig_job_serving", "0") == "0");
    {
      auto job = rig::remote::connect(load_key(key_file), {a.address()});
      REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
      CHECK(wait_for_value(web, "rig_job_serving", "1") == "1");
      job->close();
    }
    CHECK(wait_for_value(web, "rig_jobs_ended_total{outcome=\"closed\"}", "1") == "1");
    CHECK(wait_for_value(web, "rig_jobs_started_total", "1") == "1");
    CHECK(query(web, "rig_build_info") == "1");
  }
}
