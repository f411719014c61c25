// rig-bench: the benchmark harness. bench/README.md says what it measures and how to read it.
//
//   rig-bench [--quick] [--samples N] [--out DIR] [--rigd PATH] [--cpus A,B] [--only ID,...]
//             [--hosts HOST:PORT,... --key FILE [--echo HOST:PORT]]
//   rig-bench echo --listen HOST:PORT      the raw TCP peer, for runs against given hosts
//   rig-bench report RESULTS.json OUT.png  draws the report again from a results file
//
// Internal: `worker JSON` (the scenarios of one placement) and `scale-worker JSON`.
#include <sodium.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "build_commit.hpp"
#include "clock.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"
#include "remote/trust/key.hpp"
#include "report.hpp"
#include "scale.hpp"
#include "scenarios.hpp"
#include "tcp.hpp"

namespace {

using rig::bench::Child;
using rig::bench::Plan;
using rig::bench::Scenario;
using rig::bench::Where;
namespace fs = std::filesystem;

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;
// An agent or echo peer that has not said where it listens by then did not start.
constexpr int peer_start_timeout_ms = 10'000;
constexpr int peer_stop_ms = 5'000;
// The agents' completion polling (RIG_AGENT_POLL_US): the default agent polls as rigd does by
// default; a second agent never polls, for rig.agent.completion.wakeup.
constexpr const char* agent_poll_env = "RIG_AGENT_POLL_US=200";
constexpr const char* agent_wakeup_env = "RIG_AGENT_POLL_US=0";
// Every kind: an agent without CUDA devices says why, and rig.cuda is skipped with that reason.
constexpr const char* agent_kinds = "CPU,SIM,CUDA";

// --quick: a smoke run of a few seconds that exercises every path with tiny counts.
Plan quick_plan() {
  Plan p;
  p.samples = 2'000;
  p.warmup = 200;
  p.batch_ops = 500;
  p.stream_bytes_max = 4ull << 20;
  p.stream_bytes_per_size = 16ull << 20;
  p.measurement_s_max = 1;
  p.idle_s = 0.3;
  p.settle_s = 0;
  p.scale_repeats = 2;
  p.scale_agents = {1, 2};
  return p;
}

const char* const usage_text =
    "usage: rig-bench [--quick] [--samples N] [--out DIR] [--rigd PATH] [--cpus A,B]\n"
    "                 [--only ID,...] [--machine NAME]\n"
    "                 [--hosts HOST:PORT,... --key FILE [--echo HOST:PORT]]\n"
    "       rig-bench echo --listen HOST:PORT\n"
    "       rig-bench report RESULTS.json OUT.png\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "rig-bench: %s\n%s", why.c_str(), usage_text);
  std::exit(exit_usage);
}

// An address on the command line; a usage error, naming `what`, when it is not one.
rig::remote::Address address_arg(const std::string& text, const std::string& what,
                                 rig::remote::PortZero zero = rig::remote::PortZero::refused) {
  auto at = rig::remote::parse_address(text, zero);
  if (!at) usage("bad address '" + text + "' in " + what + ": " + at.error());
  return {at->host, at->port};
}

std::string first_line_of(const std::string& path, const std::string& prefix) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

std::string hostname() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

// The first NVIDIA GPU's model as the kernel module tells it ("NVIDIA H200"), or "" when there is
// none: read from /proc rather than through the driver, so that naming the machine opens nothing.
std::string gpu_model() {
  std::error_code ec;
  fs::directory_iterator it("/proc/driver/nvidia/gpus", ec);
  std::vector<fs::path> gpus;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) gpus.push_back(it->path());
  std::sort(gpus.begin(), gpus.end());
  for (const auto& g : gpus) {
    std::string model = first_line_of((g / "information").string(), "Model:");
    while (!model.empty() && (model.front() == ' ' || model.front() == '\t')) model.erase(0, 1);
    if (!model.empty()) return model;
  }
  return "";
}

// Lower-case letters, digits and '-' only: the name goes into file names.
std::string name_part(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

// What the machine is, for the results' file name and heading when --machine does not say: its
// host name, its cores and its GPU, e.g. "vm-16c-nvidia-h200" (host names of lent machines say
// little: both of ours are "vm").
std::string machine_name(const std::string& gpu) {
  std::string name = name_part(hostname());
  if (name.empty()) name = "machine";
  name += "-" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + "c";
  if (!gpu.empty()) name += "-" + name_part(gpu);
  return name;
}

nlohmann::json machine_facts(const std::string& given_name) {
  utsname u{};
  uname(&u);
  std::string model = first_line_of("/proc/cpuinfo", "model name\t: ");
  std::string os = first_line_of("/etc/os-release", "PRETTY_NAME=");
  if (os.size() >= 2 && os.front() == '"') os = os.substr(1, os.size() - 2);
  std::uint64_t mem_kib = 0;
  {
    std::istringstream in(first_line_of("/proc/meminfo", "MemTotal:"));
    in >> mem_kib;
  }
  const std::string gpu = gpu_model();
  return {{"name", given_name.empty() ? machine_name(gpu) : given_name},
          {"hostname", hostname()},
          {"gpu_model", gpu},
          {"cpu_model", model},
          {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"arch", u.machine},
          {"os", os},
          {"memory_bytes", mem_kib * 1024}};
}

// The 1, 5 and 15 minute load averages: a shared machine's other work shows here, and in the
// figures.
nlohmann::json load_average() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {a, b, c};
}

nlohmann::json versions() {
  char json_version[32];
  std::snprintf(json_version, sizeof json_version, "%d.%d.%d", NLOHMANN_JSON_VERSION_MAJOR,
                NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH);
  return {{"rig", RIG_BENCH_VERSION},     {"git", rig::bench::build_commit},
          {"compiler", __VERSION__},      {"build", RIG_BENCH_BUILDTYPE},
          {"libuv", uv_version_string()}, {"libsodium", sodium_version_string()},
          {"nlohmann_json", json_version}};
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string self_path() {
  return fs::read_symlink("/proc/self/exe").string();
}

// A peer (rigd or the echo peer) started on `cpu`, the port it printed, and for a rigd started
// with --metrics the port its endpoint printed.
struct Peer {
  Child child;
  int port = 0;
  int metrics_port = 0;
};

Peer start_peer(const std::vector<std::string>& argv, int cpu, const std::string& log,
                const std::vector<std::string>& env = {}) {
  auto c = rig::bench::spawn(argv, cpu, true, log, env);
  if (!c) throw std::runtime_error(c.error());
  const auto line = c->line(peer_start_timeout_ms);
  const auto at = rig::remote::parse_listening_line(line.value_or(""));
  Peer peer{*c, at ? at->port : 0, 0};
  if (at && std::find(argv.begin(), argv.end(), "--metrics") != argv.end()) {
    const std::string m = c->line(peer_start_timeout_ms).value_or("");
    auto mat = rig::remote::parse_address(m.starts_with("metrics ") ? m.substr(8) : "");
    peer.metrics_port = mat ? mat->port : 0;
  }
  if (!at ||
      (peer.metrics_port == 0 && std::find(argv.begin(), argv.end(), "--metrics") != argv.end())) {
    rig::bench::stop(*c, SIGKILL, peer_stop_ms);
    throw std::runtime_error(argv[0] + " did not start (its log: " + log + ")");
  }
  return peer;
}

struct Placement {
  std::string name;
  int controller_cpu;
  int agent_cpu;
  std::string what;
};

struct Options {
  Plan plan;
  bool quick = false;
  std::optional<std::size_t> samples;
  std::string out_dir = "bench/results";
  std::string rigd;
  int cpu_a = -1, cpu_b = -1;
  std::vector<rig::remote::Address> hosts;
  std::string key_file;
  std::optional<rig::remote::Address> echo;
  std::vector<std::string> only;
  std::string machine;  // --machine: the name in the results; empty: from what the machine is
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--samples") {
      const std::string v = value();
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1) usage("--samples takes a positive count");
      o.samples = static_cast<std::size_t>(n);
    } else if (a == "--out") {
      o.out_dir = value();
    } else if (a == "--rigd") {
      o.rigd = value();
    } else if (a == "--cpus") {
      const std::string v = value();
      if (std::sscanf(v.c_str(), "%d,%d", &o.cpu_a, &o.cpu_b) != 2 || o.cpu_a < 0 || o.cpu_b < 0) {
        usage("--cpus takes two core numbers: CONTROLLER,AGENT");
      }
    } else if (a == "--hosts") {
      std::stringstream in(value());
      std::string item;
      while (std::getline(in, item, ',')) {
        o.hosts.push_back(address_arg(item, "--hosts"));
      }
    } else if (a == "--only") {
      std::stringstream in(value());
      std::string item;
      while (std::getline(in, item, ',')) {
        const auto& all = rig::bench::scenarios();
        if (std::none_of(all.begin(), all.end(), [&](const Scenario& s) { return s.id == item; }))
          usage("no scenario '" + item + "' (--only)");
        o.only.push_back(item);
      }
    } else if (a == "--machine") {
      o.machine = value();
      if (o.machine.empty() || name_part(o.machine) != o.machine) {
        usage("--machine takes a name of lower-case letters, digits and '-'");
      }
    } else if (a == "--key") {
      o.key_file = value();
    } else if (a == "--echo") {
      o.echo = address_arg(value(), "--echo");
    } else if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.quick) o.plan = quick_plan();
  if (o.samples) o.plan.samples = *o.samples;
  if (!o.hosts.empty() && o.key_file.empty()) usage("--hosts needs the job's --key FILE");
  if (o.rigd.empty()) {
    if (const char* env = std::getenv("RIG_RIGD")) {
      o.rigd = env;
    } else {
      o.rigd = (fs::path(self_path()).parent_path() / ".." / "tools" / "rigd" / "rigd").string();
    }
  }
  return o;
}

nlohmann::json scenario_entry(const Scenario& s) {
  nlohmann::json e = {{"id", s.id},
                      {"title", s.title},
                      {"kind", s.kind},
                      {"metric", s.metric},
                      {"where", s.where == Where::placement ? "placement" : "whole_run"}};
  if (!s.baseline.empty()) e["baseline"] = s.baseline;
  if (s.run == nullptr) {
    e["status"] = "skipped";
    e["reason"] = s.skipped_because;
  } else {
    e["status"] = "ran";
    e["results"] = nlohmann::json::object();
  }
  return e;
}

// Ratios of each rig figure to its baseline's in the same placement: latency as rig / baseline
// (how many times slower), rates and throughput as rig / baseline (what fraction of the floor).
void add_ratios(nlohmann::json& scenarios) {
  auto find = [&](const std::string& id) -> nlohmann::json* {
    for (auto& s : scenarios) {
      if (s["id"] == id) return &s;
    }
    return nullptr;
  };
  for (auto& s : scenarios) {
    if (s["status"] != "ran" || !s.contains("baseline")) continue;
    for (auto& [placement, r] : s["results"].items()) {
      if (r.contains("points")) {
        // Throughput: rig / baseline at each transfer size the baseline measured too.
        const nlohmann::json* b = find(s["baseline"]);
        if (b == nullptr || !(*b)["results"].contains(placement)) continue;
        // Beside the stream, the stream whose receiver places the bytes as a copy does.
        const nlohmann::json* placed =
            s["baseline"] == "tcp.stream" ? find("tcp.stream.placed") : nullptr;
        const auto ratio_at = [&](const nlohmann::json* base, nlohmann::json& point,
                                  const char* key) {
          if (base == nullptr || !(*base)["results"].contains(placement)) return;
          for (const auto& bp :
               (*base)["results"][placement].value("points", nlohmann::json::array())) {
            if (bp["bytes"] != point["bytes"] || bp["stats"]["p50"].get<double>() <= 0) continue;
            point[key] = {
                {"baseline", (*base)["id"]},
                {"p50", point["stats"]["p50"].get<double>() / bp["stats"]["p50"].get<double>()}};
          }
        };
        for (auto& point : r["points"]) {
          ratio_at(b, point, "ratio");
          ratio_at(placed, point, "ratio_placed");
        }
        continue;
      }
      if (!r.contains("stats")) continue;
      auto ratio_to = [&](const std::string& id) -> nlohmann::json {
        const nlohmann::json* b = find(id);
        if (b == nullptr || !(*b)["results"].contains(placement)) return nullptr;
        const auto& bs = (*b)["results"][placement];
        if (!bs.contains("stats") || bs["stats"]["p50"].get<double>() <= 0) return nullptr;
        return {{"baseline", id},
                {"p50", r["stats"]["p50"].get<double>() / bs["stats"]["p50"].get<double>()},
                {"p99", r["stats"]["p99"].get<double>() / bs["stats"]["p99"].get<double>()}};
      };
      r["ratio"] = ratio_to(s["baseline"]);
      if (s["metric"] == "latency") r["ratio_spinning"] = ratio_to("tcp.pingpong.spinning");
    }
  }
}

void print_summary(const nlohmann::json& results) {
  std::vector<std::string> order;
  for (const auto& p : results["placements"]) order.push_back(p["name"]);
  order.push_back("unpinned");
  std::printf("%-26s %-11s %12s %12s   %s\n", "scenario", "placement", "p50", "p99",
              "ratio to baseline (p50)");
  for (const auto& s : results["scenarios"]) {
    if (s["status"] != "ran") {
      std::printf("%-26s %-11s skipped: %s\n", s["id"].get<std::string>().c_str(), "",
                  s["reason"].get<std::string>().c_str());
      continue;
    }
    for (const std::string& placement : order) {
      if (!s["results"].contains(placement)) continue;
      const auto& r = s["results"][placement];
      if (r.contains("points") && s["metric"] == "throughput") {
        // One line per placement: p50 GB/s at each size, with the ratio to the baseline's.
        std::string line;
        for (const auto& point : r["points"]) {
          char buf[96];
          const double bytes = point["bytes"].get<double>();
          std::snprintf(buf, sizeof buf, " %s%.0f%s %.2f", line.empty() ? "" : "|",
                        bytes >= (1 << 20) ? bytes / (1 << 20) : bytes / 1024,
                        bytes >= (1 << 20) ? "M" : "K", point["stats"]["p50"].get<double>());
          line += buf;
          if (point.contains("ratio") && point.contains("ratio_placed")) {
            std::snprintf(buf, sizeof buf, " (%.2fx, %.2fx placed)",
                          point["ratio"]["p50"].get<double>(),
                          point["ratio_placed"]["p50"].get<double>());
            line += buf;
          } else if (point.contains("ratio")) {
            std::snprintf(buf, sizeof buf, " (%.2fx)", point["ratio"]["p50"].get<double>());
            line += buf;
          }
        }
        std::printf("%-26s %-11s GB/s:%s\n", s["id"].get<std::string>().c_str(), placement.c_str(),
                    line.c_str());
        continue;
      }
      if (!r.contains("stats")) continue;
      const std::string unit = r["unit"];
      std::string ratio;
      if (r.contains("ratio") && !r["ratio"].is_null()) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%.2fx %s", r["ratio"]["p50"].get<double>(),
                      r["ratio"]["baseline"].get<std::string>().c_str());
        ratio = buf;
        if (r.contains("ratio_spinning") && !r["ratio_spinning"].is_null()) {
          std::snprintf(buf, sizeof buf, ", %.3gx spinning",
                        r["ratio_spinning"]["p50"].get<double>());
          ratio += buf;
        }
      }
      std::printf("%-26s %-11s %9.1f %-2s %9.1f %-2s   %s\n", s["id"].get<std::string>().c_str(),
                  placement.c_str(), r["stats"]["p50"].get<double>(), unit == "us" ? "us" : "/s",
                  r["stats"]["p99"].get<double>(), unit == "us" ? "us" : "/s", ratio.c_str());
    }
  }
}

int run(const Options& o) {
  const std::uint64_t t_start = rig::bench::now_ns();
  nlohmann::json results;
  results["schema"] = "rig-bench/1";
  results["machine"] = machine_facts(o.machine);
  results["versions"] = versions();
  results["run"] = {
      {"date", today()},
      {"quick", o.quick},
      {"plan", rig::bench::plan_json(o.plan)},
      {"agents", o.hosts.empty() ? "rigd daemons on loopback, port 0, fresh key" : "given hosts"}};
  results["run"]["load_average_start"] = load_average();
  std::fprintf(stderr, "rig-bench: measuring the clock\n");
  results["clock"] = rig::bench::measure_clock_overhead();

  const fs::path scratch = fs::temp_directory_path() / ("rig-bench-" + std::to_string(getpid()));
  fs::create_directories(scratch);
  std::string key_file = o.key_file;
  if (key_file.empty()) {
    key_file = (scratch / "job.key").string();
    auto made = rig::remote::write_new_key(key_file);
    if (!made) throw std::runtime_error(made.error());
  }

  std::vector<Placement> placements;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!o.hosts.empty()) {
    placements.push_back({"given", -1, -1, "controller here, unpinned; agents on the given hosts"});
  } else {
    const int b = o.cpu_b >= 0 ? o.cpu_b : static_cast<int>(cores - 1);
    const int a = o.cpu_a >= 0 ? o.cpu_a : (cores > 1 ? static_cast<int>(cores - 2) : b);
    placements.push_back({"same-core", b, b, "controller, agent and echo peer on one core"});
    if (a != b) {
      placements.push_back(
          {"cross-core", a, b, "controller on one core, agent and echo peer on another"});
    }
  }
  results["placements"] = nlohmann::json::array();
  for (const auto& p : placements) {
    results["placements"].push_back({{"name", p.name},
                                     {"controller_cpu", p.controller_cpu},
                                     {"agent_cpu", p.agent_cpu},
                                     {"what", p.what}});
  }

  nlohmann::json scenarios = nlohmann::json::array();
  for (const Scenario& s : rig::bench::scenarios()) scenarios.push_back(scenario_entry(s));
  auto entry = [&](std::string_view id) -> nlohmann::json& {
    for (auto& s : scenarios) {
      if (s["id"] == id) return s;
    }
    throw std::logic_error("no scenario " + std::string(id));
  };

  const std::string self = self_path();
  for (const Placement& p : placements) {
    std::fprintf(stderr, "rig-bench: placement %s: %s\n", p.name.c_str(), p.what.c_str());
    std::vector<Peer> peers;
    nlohmann::json args = {{"plan", rig::bench::plan_json(o.plan)},
                           {"placement", p.name},
                           {"key_file", key_file},
                           {"cpus", p.controller_cpu < 0 ? std::vector<int>{}
                                    : p.agent_cpu == p.controller_cpu
                                        ? std::vector<int>{p.controller_cpu}
                                        : std::vector<int>{p.controller_cpu, p.agent_cpu}},
                           {"only", o.only}};
    try {
      if (o.hosts.empty()) {
        peers.push_back(start_peer({self, "echo", "--listen", "127.0.0.1:0"}, p.agent_cpu,
                                   (scratch / "echo.log").string()));
        args["echo"] = nlohmann::json::array({"127.0.0.1", peers.back().port});
        args["peer_pids"].push_back({"echo", peers.back().child.pid});
        // The first agent serves its metrics, as an operator's would: rig.host.empty.flooded
        // floods that endpoint.
        peers.push_back(start_peer({o.rigd, "--key", key_file, "--listen", "127.0.0.1:0", "--kinds",
                                    agent_kinds, "--metrics", "127.0.0.1:0"},
                                   p.agent_cpu, (scratch / "rigd.log").string(), {agent_poll_env}));
        args["agents"] =
            nlohmann::json::array({nlohmann::json::array({"127.0.0.1", peers.back().port})});
        args["agent_metrics_port"] = peers.back().metrics_port;
        args["peer_pids"].push_back({"agent", peers.back().child.pid});
        peers.push_back(start_peer(
            {o.rigd, "--key", key_file, "--listen", "127.0.0.1:0", "--kinds", agent_kinds},
            p.agent_cpu, (scratch / "rigd-wakeup.log").string(), {agent_wakeup_env}));
        args["wakeup_agent"] = nlohmann::json::array({"127.0.0.1", peers.back().port});
        args["peer_pids"].push_back({"wakeup_agent", peers.back().child.pid});
        // The rails' source agent, on the controller's core: a rail between the two agents then
        // runs between the same two cores as the TCP baselines.
        peers.push_back(start_peer(
            {o.rigd, "--key", key_file, "--listen", "127.0.0.1:0", "--kinds", agent_kinds},
            p.controller_cpu, (scratch / "rigd-rail.log").string(), {agent_poll_env}));
        args["rail_agent"] = nlohmann::json::array({"127.0.0.1", peers.back().port});
        args["peer_pids"].push_back({"rail_agent", peers.back().child.pid});
      } else {
        if (o.echo) args["echo"] = nlohmann::json::array({o.echo->first, o.echo->second});
        args["agents"] = nlohmann::json::array();
        for (const auto& h : o.hosts)
          args["agents"].push_back(nlohmann::json::array({h.first, h.second}));
        if (o.hosts.size() > 1) {
          args["rail_agent"] = nlohmann::json::array({o.hosts[1].first, o.hosts[1].second});
        }
      }
      auto w = rig::bench::spawn({self, "worker", args.dump()}, p.controller_cpu, true);
      if (!w) throw std::runtime_error(w.error());
      const std::string text = w->rest();
      const int status = rig::bench::wait_exit(*w);
      if (status != 0 || text.empty()) throw std::runtime_error("the worker failed (stderr above)");
      const auto parsed = nlohmann::json::parse(text);
      for (auto& [id, r] : parsed.items()) {
        entry(id)["results"][p.name] = r;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rig-bench: placement %s: %s\n", p.name.c_str(), e.what());
      for (auto& peer : peers) rig::bench::stop(peer.child, SIGTERM, peer_stop_ms);
      throw;
    }
    for (auto& peer : peers) rig::bench::stop(peer.child, SIGTERM, peer_stop_ms);
  }

  rig::bench::Ctx ctx;
  ctx.plan = o.plan;
  ctx.placement = "unpinned";
  ctx.key_file = key_file;
  ctx.rigd_path = o.rigd;
  ctx.self_path = self;
  ctx.scratch_dir = scratch.string();
  ctx.agents = o.hosts;
  ctx.given_hosts = !o.hosts.empty();
  for (const Scenario& s : rig::bench::scenarios()) {
    if (s.where != Where::whole_run || s.run == nullptr) continue;
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), s.id) == o.only.end()) {
      entry(s.id)["results"]["unpinned"] = {{"skipped", "left out by --only"}};
      continue;
    }
    entry(s.id)["results"]["unpinned"] = s.run(ctx);
  }
  for (auto& s : scenarios) {
    if (s["status"] != "ran") continue;
    if (s["results"].empty()) {
      s["status"] = "skipped";
      s["reason"] = "needs an echo peer on the agents' side: rig-bench echo there, and --echo";
      continue;
    }
    // A scenario that every placement skipped (no CUDA device, left out by --only) is skipped,
    // with the first placement's reason; its results keep each placement's.
    bool all_skipped = true;
    for (const auto& [placement, r] : s["results"].items()) {
      all_skipped = all_skipped && r.contains("skipped");
    }
    if (all_skipped) {
      s["reason"] = s["results"].begin().value()["skipped"];
      s["status"] = "skipped";
    }
  }
  add_ratios(scenarios);
  results["scenarios"] = scenarios;
  results["run"]["load_average_end"] = load_average();
  results["run"]["duration_s"] = static_cast<double>(rig::bench::now_ns() - t_start) / 1e9;

  fs::create_directories(o.out_dir);
  const std::string stem =
      (fs::path(o.out_dir) / (results["machine"]["name"].get<std::string>() + "-" + today()))
          .string();
  {
    std::ofstream f(stem + ".json");
    f << results.dump(1) << "\n";
    if (!f) throw std::runtime_error("cannot write " + stem + ".json");
  }
  rig::bench::write_report(results, stem + ".png");
  print_summary(results);
  std::printf("wrote %s.json and %s.png in %.0f s\n", stem.c_str(), stem.c_str(),
              results["run"]["duration_s"].get<double>());
  fs::remove_all(scratch);
  return 0;
}

int worker(const nlohmann::json& args) {
  rig::bench::Ctx ctx;
  ctx.plan = rig::bench::plan_from_json(args.at("plan"));
  ctx.placement = args.at("placement");
  ctx.key_file = args.at("key_file");
  if (args.contains("echo")) {
    ctx.echo_host = args["echo"].at(0);
    ctx.echo_port = args["echo"].at(1);
  }
  for (const auto& a : args.at("agents")) ctx.agents.emplace_back(a.at(0), a.at(1));
  if (args.contains("wakeup_agent")) {
    ctx.wakeup_agent = rig::remote::Address(args["wakeup_agent"].at(0), args["wakeup_agent"].at(1));
  }
  if (args.contains("rail_agent")) {
    ctx.rail_agent = rig::remote::Address(args["rail_agent"].at(0), args["rail_agent"].at(1));
  }
  ctx.only = args.value("only", std::vector<std::string>{});
  ctx.cpus = args.value("cpus", std::vector<int>{});
  ctx.agent_metrics_port = args.value("agent_metrics_port", 0);
  for (const auto& p : args.value("peer_pids", nlohmann::json::array())) {
    ctx.peer_pids.emplace_back(p.at(0).get<std::string>(), p.at(1).get<pid_t>());
  }
  const auto out = rig::bench::run_placement(ctx);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "worker" && argc == 3) return worker(nlohmann::json::parse(argv[2]));
    if (cmd == "scale-worker" && argc == 3) {
      return rig::bench::scale_worker(nlohmann::json::parse(argv[2]));
    }
    if (cmd == "echo") {
      if (argc != 4 || std::string(argv[2]) != "--listen") usage("echo --listen HOST:PORT");
      const auto addr = address_arg(argv[3], "echo --listen", rig::remote::PortZero::allowed);
      return rig::bench::run_echo_peer(addr.first, addr.second);
    }
    if (cmd == "report") {
      if (argc != 4) usage("report RESULTS.json OUT.png");
      std::ifstream f(argv[2]);
      if (!f) usage(std::string("cannot read ") + argv[2]);
      rig::bench::write_report(nlohmann::json::parse(f), argv[3]);
      return 0;
    }
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rig-bench: %s\n", e.what());
    return exit_failure;
  }
}
