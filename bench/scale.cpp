#include "scale.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "clock.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"
#include "scenarios.hpp"
#include "stats.hpp"

namespace rig::bench {

namespace {

// A daemon forks the process for its next job once the last one ended; this long is plenty.
constexpr auto fresh_child_timeout = std::chrono::seconds(10);
constexpr auto agent_start_timeout_ms = 10'000;
constexpr int daemon_stop_ms = 5'000;

// Waits until every daemon has a job process other than the one in `previous` (if any).
std::vector<pid_t> wait_for_fresh_children(const std::vector<pid_t>& daemons,
                                           const std::vector<pid_t>& previous) {
  const auto until = std::chrono::steady_clock::now() + fresh_child_timeout;
  std::vector<pid_t> now(daemons.size(), -1);
  for (;;) {
    bool all = true;
    for (std::size_t i = 0; i < daemons.size(); ++i) {
      const auto kids = children_of(daemons[i]);
      now[i] = kids.empty() ? -1 : kids.front();
      if (now[i] < 0 || (!previous.empty() && now[i] == previous[i])) all = false;
    }
    if (all) return now;
    if (std::chrono::steady_clock::now() > until) {
      throw std::runtime_error("a rigd daemon made no process for the next job within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

double percent_of_core(std::uint64_t cpu_ns, std::uint64_t wall_ns) {
  return 100.0 * static_cast<double>(cpu_ns) / static_cast<double>(wall_ns);
}

}  // namespace

int scale_worker(const nlohmann::json& args) {
  const Plan plan = plan_from_json(args.at("plan"));
  std::vector<rig::remote::Address> agents;
  for (const auto& a : args.at("agents")) agents.emplace_back(a.at(0), a.at(1));
  const auto daemons = args.at("daemons").get<std::vector<pid_t>>();
  auto key = rig::remote::read_key(args.at("key_file").get<std::string>());
  if (!key) {
    std::fprintf(stderr, "rig-bench scale: %s\n", key.error().c_str());
    return 1;
  }

  nlohmann::json out = {{"agents", agents.size()}};
  std::vector<double> start_ms;
  std::vector<pid_t> previous;
  for (int rep = 0; rep < plan.scale_repeats; ++rep) {
    std::vector<pid_t> serving;
    if (!daemons.empty()) serving = wait_for_fresh_children(daemons, previous);
    const std::uint64_t rss_before = rss_bytes();
    const std::uint64_t t0 = now_ns();
    auto job = rig::remote::connect(*key, agents);
    const std::uint64_t t1 = now_ns();
    if (!job) {
      std::fprintf(stderr, "rig-bench scale: the job did not start: %s\n", job.error().c_str());
      return 1;
    }
    start_ms.push_back(static_cast<double>(t1 - t0) / 1e6);
    if (rep == 0) {
      // Memory and idle CPU once, on the first job: the controller's growth from no job to an
      // open one, and what the job's processes spend while nobody submits anything.
      const std::uint64_t rss_after = rss_bytes();
      out["controller_rss_before_bytes"] = rss_before;
      out["controller_rss_after_bytes"] = rss_after;
      out["controller_rss_per_agent_kib"] =
          (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / 1024.0 /
          static_cast<double>(agents.size());
      std::vector<std::uint64_t> sched0, stat0;
      for (pid_t p : serving) {
        sched0.push_back(cpu_ns_schedstat(p).value_or(0));
        stat0.push_back(cpu_ns_stat(p).value_or(0));
      }
      const std::uint64_t self0 = cpu_ns_schedstat(getpid()).value_or(0);
      const std::uint64_t w0 = now_ns();
      std::this_thread::sleep_for(std::chrono::duration<double>(plan.idle_s));
      const std::uint64_t wall = now_ns() - w0;
      const std::uint64_t self1 = cpu_ns_schedstat(getpid()).value_or(0);
      out["idle_s"] = static_cast<double>(wall) / 1e9;
      out["controller_idle_cpu_percent"] = percent_of_core(self1 - self0, wall);
      if (!serving.empty()) {
        std::uint64_t sched = 0, stat = 0;
        for (std::size_t i = 0; i < serving.size(); ++i) {
          sched += cpu_ns_schedstat(serving[i]).value_or(0) - sched0[i];
          stat += cpu_ns_stat(serving[i]).value_or(0) - stat0[i];
        }
        const auto n = static_cast<std::uint64_t>(serving.size());
        out["idle_cpu_per_agent_percent"] = percent_of_core(sched / n, wall);
        out["idle_cpu_per_agent_percent_stat"] = percent_of_core(stat / n, wall);
      } else {
        out["idle_cpu_per_agent_skipped"] =
            "the agents are given hosts: their processes are not ours to read";
      }
    }
    job->close();
    previous = serving;
  }
  out["job_start_ms"] = stats_json(summarize(start_ms, 0));
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

nlohmann::json run_scale(Ctx& ctx) {
  std::vector<Child> daemons;
  std::vector<rig::remote::Address> addresses = ctx.agents;
  auto stop_daemons = [&] {
    for (Child& d : daemons) kill(d.pid, SIGTERM);
    for (Child& d : daemons) stop(d, SIGTERM, daemon_stop_ms);
  };
  int most = *std::max_element(ctx.plan.scale_agents.begin(), ctx.plan.scale_agents.end());
  if (!ctx.given_hosts) {
    addresses.clear();
    std::fprintf(stderr, "rig-bench: [scale] starting %d rigd daemons on loopback\n", most);
    for (int i = 0; i < most; ++i) {
      auto d = spawn({ctx.rigd_path, "--key", ctx.key_file, "--listen", "127.0.0.1:0"}, -1, true,
                     ctx.scratch_dir + "/rigd-scale.log");
      if (!d) {
        stop_daemons();
        throw std::runtime_error(d.error());
      }
      daemons.push_back(*d);
      const auto line = d->line(agent_start_timeout_ms);
      const auto at = rig::remote::parse_listening_line(line.value_or(""));
      if (!at) {
        stop_daemons();
        throw std::runtime_error("a rigd daemon did not start (see " + ctx.scratch_dir +
                                 "/rigd-scale.log)");
      }
      addresses.emplace_back(at->host, at->port);
    }
  }
  nlohmann::json points = nlohmann::json::array();
  try {
    for (int count : ctx.plan.scale_agents) {
      if (count > static_cast<int>(addresses.size())) continue;
      nlohmann::json args = {{"plan", plan_json(ctx.plan)}, {"key_file", ctx.key_file}};
      args["agents"] = nlohmann::json::array();
      args["daemons"] = nlohmann::json::array();
      for (int i = 0; i < count; ++i) {
        args["agents"].push_back(nlohmann::json::array({addresses[i].first, addresses[i].second}));
        if (!daemons.empty()) args["daemons"].push_back(daemons[i].pid);
      }
      auto w = spawn({ctx.self_path, "scale-worker", args.dump()}, -1, true);
      if (!w) throw std::runtime_error(w.error());
      const std::string text = w->rest();
      const int status = wait_exit(*w);
      if (status != 0 || text.empty()) {
        throw std::runtime_error("the scale worker for " + std::to_string(count) +
                                 " agents failed (its stderr is above)");
      }
      auto p = nlohmann::json::parse(text);
      std::fprintf(stderr,
                   "rig-bench: [scale] %d agents: job start p50 %.1f ms, idle CPU per agent "
                   "%.3f%%, controller RSS per agent %.0f KiB\n",
                   count, p["job_start_ms"]["p50"].get<double>(),
                   p.value("idle_cpu_per_agent_percent", 0.0),
                   p["controller_rss_per_agent_kib"].get<double>());
      points.push_back(std::move(p));
    }
  } catch (...) {
    stop_daemons();
    throw;
  }
  stop_daemons();
  return {{"points", points},
          {"note",
           "agents and controller unpinned; job start is connect() to the last agent READY, every "
           "repeat a fresh job on the same daemons; idle CPU from /proc/PID/task/*/schedstat "
           "(and /proc/PID/stat for comparison) of each job process"}};
}

}  // namespace rig::bench
