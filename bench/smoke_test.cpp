// The harness's smoke test: a --quick run must write a results file with every key the README
// documents and a well-formed PNG. It checks shape, never timings.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "png.hpp"

namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (run through meson test)");
  return v;
}

std::uint32_t be32(const std::vector<std::uint8_t>& b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) |
         (std::uint32_t{b[at + 2]} << 8) | std::uint32_t{b[at + 3]};
}

// Checks the PNG's structure: signature, then chunks each with a correct CRC, IHDR first with a
// sane size, at least one IDAT, IEND last with nothing after it.
void check_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  const std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(f)),
                                    std::istreambuf_iterator<char>());
  const std::vector<std::uint8_t> signature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(b.size() > signature.size());
  REQUIRE(std::equal(signature.begin(), signature.end(), b.begin()));
  std::vector<std::string> types;
  std::size_t at = signature.size();
  while (at < b.size()) {
    REQUIRE(at + 12 <= b.size());
    const std::uint32_t len = be32(b, at);
    REQUIRE(at + 12 + len <= b.size());
    const std::string type(b.begin() + static_cast<std::ptrdiff_t>(at + 4),
                           b.begin() + static_cast<std::ptrdiff_t>(at + 8));
    const std::uint32_t crc = rig::bench::crc32(
        std::span<const std::uint8_t>(b.data() + at + 4, 4 + static_cast<std::size_t>(len)));
    CHECK_MESSAGE(crc == be32(b, at + 8 + len), "bad CRC in chunk " << type);
    if (type == "IHDR") {
      REQUIRE(len == 13);
      CHECK(be32(b, at + 8) >= 800);   // width
      CHECK(be32(b, at + 12) >= 600);  // height
    }
    types.push_back(type);
    at += 12 + len;
  }
  REQUIRE(!types.empty());
  CHECK(types.front() == "IHDR");
  CHECK(types.back() == "IEND");
  CHECK(std::count(types.begin(), types.end(), "IDAT") >= 1);
  CHECK(at == b.size());
}

void check_stats(const nlohmann::json& stats, const std::string& where) {
  INFO(where);
  for (const char* key :
       {"count", "warmup_excluded", "p50", "p90", "p99", "p99_9", "mean", "min", "max"}) {
    CHECK_MESSAGE(stats.contains(key), "no " << key);
  }
  CHECK(stats["count"].get<long>() > 0);
}

// Runs `bin` with `args` (shell words, quoted by the caller) into a fresh directory `out`; the
// results file it wrote, parsed, and that file's name. Fails the test when the run fails.
std::pair<nlohmann::json, std::string> run_bench(const std::string& bin, const std::string& args,
                                                 const fs::path& out) {
  fs::remove_all(out);
  const std::string cmd =
      "'" + bin + "' " + args + " --out '" + out.string() + "' >'" + out.string() + ".log' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream log(out.string() + ".log");
    MESSAGE(std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()));
  }
  REQUIRE(rc == 0);
  std::vector<fs::path> jsons;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() == ".json") jsons.push_back(e.path());
  }
  REQUIRE(jsons.size() == 1);
  std::ifstream f(jsons[0]);
  return {nlohmann::json::parse(f), jsons[0].filename().string()};
}

// The results of scenario `id` in its first placement.
nlohmann::json first_result(const nlohmann::json& j, const std::string& id) {
  for (const auto& s : j["scenarios"]) {
    if (s["id"] != id) continue;
    REQUIRE(s["status"] == "ran");
    REQUIRE(!s["results"].empty());
    return s["results"].begin().value();
  }
  FAIL("no scenario " << id);
  return {};
}

}  // namespace

TEST_CASE("rig-bench carried elsewhere: its kernels from beside it, the name it is given") {
  // The binary and its kernels copied to a directory of their own, as they are to a lent machine
  // without the build tree: the kernels must be read from beside the binary. A broken copy there
  // shows which file is read (the build tree's is still in place and whole).
  const fs::path dir =
      fs::temp_directory_path() / ("rig-bench-carried-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(env("RIG_BENCH"), dir / "rig-bench");
  const fs::path beside = dir / "rig_bench_kernels.so";
  std::ofstream(beside).close();  // empty: unreadable as a program
  const std::string args =
      "--quick --only rig.sim.run --machine carried-test --rigd '" + env("RIG_RIGD") + "'";
  {
    auto [j, name] = run_bench((dir / "rig-bench").string(), args, dir / "out-broken");
    const auto r = first_result(j, "rig.sim.run");
    REQUIRE(r.contains("error"));
    CHECK(r["error"].get<std::string>().find("cannot read " + beside.string()) !=
          std::string::npos);
  }
  fs::copy_file(env("RIG_BENCH_KERNELS_SO"), beside, fs::copy_options::overwrite_existing);
  auto [j, name] = run_bench((dir / "rig-bench").string(), args, dir / "out");
  CHECK(name.rfind("carried-test-", 0) == 0);
  CHECK(j["machine"]["name"] == "carried-test");
  const auto r = first_result(j, "rig.sim.run");
  CHECK_MESSAGE(!r.contains("error"), r.value("error", ""));
  CHECK(r.contains("stats"));
  // The commit was taken when the binary was built: the copy has no source tree to ask.
  const std::string git = j["versions"]["git"];
  CHECK(!git.empty());
  fs::remove_all(dir);
}

TEST_CASE("rig-bench --quick writes the results file and a valid PNG report") {
  const fs::path out = fs::temp_directory_path() / ("rig-bench-smoke-" + std::to_string(getpid()));
  fs::remove_all(out);
  const std::string cmd = "'" + env("RIG_BENCH") + "' --quick --rigd '" + env("RIG_RIGD") +
                          "' --out '" + out.string() + "' >'" + out.string() + ".log' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream log(out.string() + ".log");
    MESSAGE(std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()));
  }
  REQUIRE(rc == 0);

  std::vector<fs::path> jsons, pngs;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() == ".json") jsons.push_back(e.path());
    if (e.path().extension() == ".png") pngs.push_back(e.path());
  }
  REQUIRE(jsons.size() == 1);
  REQUIRE(pngs.size() == 1);
  CHECK(pngs[0].stem() == jsons[0].stem());

  std::ifstream f(jsons[0]);
  const auto j = nlohmann::json::parse(f);
  for (const char* key : {"cpu_model", "cores", "kernel", "name", "hostname", "gpu_model"}) {
    CHECK_MESSAGE(j["machine"].contains(key), "machine." << key);
  }
  for (const char* key : {"rig", "git", "compiler", "libuv", "libsodium", "nlohmann_json"}) {
    CHECK_MESSAGE(j["versions"].contains(key), "versions." << key);
  }
  check_stats(j["clock"]["steady_clock_ns"], "clock");
  CHECK(j["run"]["quick"] == true);
  CHECK(!j["placements"].empty());

  bool saw_rig_latency = false, saw_sim = false, saw_bulk = false, saw_scale = false;
  bool saw_rail = false, saw_rail_pingpong = false;
  for (const auto& s : j["scenarios"]) {
    INFO(s.dump().substr(0, 300));
    REQUIRE(s.contains("id"));
    REQUIRE(s.contains("status"));
    if (s["status"] == "skipped") {
      CHECK(!s["reason"].get<std::string>().empty());
      continue;
    }
    REQUIRE(s["status"] == "ran");
    for (const auto& [placement, r] : s["results"].items()) {
      const std::string where = s["id"].get<std::string>() + " " + placement;
      REQUIRE_MESSAGE(!r.contains("error"), where << ": " << r.value("error", ""));
      if (r.contains("skipped")) {
        CHECK(!r["skipped"].get<std::string>().empty());
        continue;
      }
      if (r.contains("stats")) check_stats(r["stats"], where);
      if (r.contains("points")) {
        for (const auto& p : r["points"]) {
          if (p.contains("stats")) check_stats(p["stats"], where);
          if (p.contains("job_start_ms")) check_stats(p["job_start_ms"], where);
        }
      }
      if (s["metric"] == "latency") CHECK(!r["cdf"].empty());
      if (s["id"] == "rig.rail.pingpong") {
        // Host code answered on both agents: their workers ran, as the scheduler counted them.
        REQUIRE(r.contains("sched"));
        std::set<std::string> ran;
        for (const auto& t : r["sched"]["threads"]) {
          if (t["thread"] == "rig-worker" && t["slices"].get<long>() > 0) ran.insert(t["process"]);
        }
        CHECK(ran.count("agent job") == 1);
        CHECK(ran.count("rail_agent job") == 1);
      }
      if (s["id"] == "rig.rail.agents") {
        for (const auto& p : r["points"]) CHECK(p["sched"]["transfers"].get<long>() > 0);
      }
      if (s.contains("baseline") && s["metric"] == "throughput") {
        // Throughput: a ratio to the baseline at each transfer size, and against the stream,
        // one to the stream whose receiver places the bytes as a copy does.
        for (const auto& p : r["points"]) {
          CHECK(p.contains("ratio"));
          if (s["baseline"] == "tcp.stream") CHECK(p.contains("ratio_placed"));
        }
      } else if (s.contains("baseline")) {
        CHECK(r.contains("ratio"));
      }
    }
    saw_rig_latency = saw_rig_latency || s["id"] == "rig.host.empty";
    saw_sim = saw_sim || s["id"] == "rig.sim.copy64";
    saw_bulk = saw_bulk || s["id"] == "rig.copy.from_remote.sim";
    saw_scale = saw_scale || s["id"] == "rig.scale";
    saw_rail = saw_rail || s["id"] == "rig.rail.agents";
    saw_rail_pingpong = saw_rail_pingpong || s["id"] == "rig.rail.pingpong";
  }
  CHECK(saw_rig_latency);
  CHECK(saw_sim);
  CHECK(saw_bulk);
  CHECK(saw_scale);
  CHECK(saw_rail);
  CHECK(saw_rail_pingpong);

  check_png(pngs[0].string());
  fs::remove_all(out);
  fs::remove(out.string() + ".log");
}
