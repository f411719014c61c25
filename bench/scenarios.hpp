// The scenario table: every figure the harness reports, rig's and the baselines', in one list.
//
// A scenario runs either once per placement, in a worker process pinned to the controller's core
// with its agent and echo peer pinned to the agent's core (Where::placement), or once per run in
// the harness itself (Where::whole_run). A scenario whose API does not exist yet has no run
// function and a reason, which the results carry as "skipped".
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace rig::bench {

// How much to measure. Defaults are the full run; --quick shrinks every count.
struct Plan {
  std::size_t samples = 100'000;  // latency samples kept per measurement, after the warm-up
  std::size_t warmup = 5'000;     // operations run and left out before them
  std::size_t window = 32;        // outstanding operations in the pipelined scenarios
  std::size_t batch_ops = 2'000;  // pipelined operations per throughput sample
  std::uint64_t stream_bytes_max = 1ull << 30;       // largest bulk transfer
  std::uint64_t stream_bytes_per_size = 2ull << 30;  // bytes moved at each transfer size
  double measurement_s_max = 30;  // a measurement stops here and says so (cut_short)
  double idle_s = 3;              // how long idle agents are watched in the scale scenario
  // How long a placement waits after a bulk scenario of rig's before its next scenario: a process
  // that found its core contended keeps its spins off for up to spins_off_ns_max (1 s,
  // core/limits.hpp), and a bulk transfer on one core is such contention, so without the wait the
  // next latency figure measures that verdict's tail, not its own path (bench/README.md,
  // "Session 18").
  double settle_s = 1.2;
  int scale_repeats = 5;  // job starts timed at each agent count
  std::vector<int> scale_agents = {1, 8, 32, 64};
};

nlohmann::json plan_json(const Plan& p);
Plan plan_from_json(const nlohmann::json& j);

// Where a worker's peers are and what it may use. Owner: the worker's main thread.
struct Ctx {
  Plan plan;
  std::string placement;
  std::string echo_host;
  int echo_port = 0;
  std::vector<rig::remote::Address> agents;  // the first: polls for completion (default 200 us)
  // An agent started with RIG_AGENT_POLL_US=0 (completion always through the wake-up thread), for
  // rig.agent.completion.wakeup; none with given hosts.
  std::optional<rig::remote::Address> wakeup_agent;
  // A second agent, on the controller's core (the first agent's with both on one core): the
  // source of the rails between two agents (rig.rail.*), the first agent their destination; with
  // given hosts, the second host, if there is one.
  std::optional<rig::remote::Address> rail_agent;
  // The placement's cores (the controller's, then the agent's if another); none with given hosts.
  // The *.contended scenarios put a busy neighbour on each.
  std::vector<int> cpus;
  std::string key_file;
  // The harness's peers by role ("agent", "rail_agent", ...) and their processes: the threads of
  // these, of their job processes and of this controller are counted through each scenario
  // ("sched" in its results). None with given hosts.
  std::vector<std::pair<std::string, pid_t>> peer_pids;
  // The first agent's --metrics endpoint on 127.0.0.1 (0: none, as with given hosts).
  int agent_metrics_port = 0;
  // Scenario ids to run (--only); empty: all.
  std::vector<std::string> only;
  // For whole-run scenarios, run in the harness: how to start agents and workers.
  std::string rigd_path;
  std::string self_path;
  std::string scratch_dir;
  bool given_hosts = false;

  // The first agent's host (CPU@NAME), through a job started at the first call and kept until
  // close_job().
  rig::Device host();
  // The host of the agent at `agent`, through a job with that agent alone: a job with another
  // agent is closed first (a process runs one job at a time).
  rig::Device host_of(const rig::remote::Address& agent);
  // The hosts of `agents`, in their order, through a job with those agents alone (as host_of).
  std::vector<rig::Device> hosts_of(const std::vector<rig::remote::Address>& agents);
  // The first proxy of `kind` on `agent`'s machine; raises with the agent's reason if none.
  rig::Device proxy(const rig::remote::Address& agent, const std::string& kind);
  void close_job();

 private:
  std::optional<rig::remote::Job> job_;
  std::vector<rig::remote::Address> job_agents_;
};

enum class Where { placement, whole_run };

struct Scenario {
  std::string_view id;
  std::string_view title;
  std::string_view kind;      // "rig" or "baseline"
  std::string_view metric;    // "latency" (us), "ops" (ops/s), "throughput" (GB/s), "scale"
  std::string_view baseline;  // the scenario this one's ratio is taken to; empty for baselines
  Where where;
  nlohmann::json (*run)(Ctx&);       // nullptr until the API it needs exists
  std::string_view skipped_because;  // why run is nullptr
};

std::span<const Scenario> scenarios();

// The worker: runs every placement scenario with `ctx`, printing progress on stderr; returns
// {"scenario id": result} with {"error": why} for one that threw.
nlohmann::json run_placement(Ctx& ctx);

// The bytes one empty submission puts on the wire (a SUBMIT frame; its REACHED answer is a little
// shorter), from rig's own codec: the baselines' message size, each way.
std::size_t submit_frame_bytes();

}  // namespace rig::bench
