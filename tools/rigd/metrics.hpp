// What rigd's metrics endpoint reports, and its two renderings: the Prometheus text exposition
// format (/metrics) and JSON (/status). The daemon's main thread records each job process's start
// and end here; the metrics thread renders; what a job process knows while it runs comes from its
// JobPage (job_page.hpp), read at each rendering.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rigd/job_page.hpp"

namespace rig::rigd {

// The kinds of a failed job's root cause, a fixed set (bounded labels). `other` is a cause none of
// the others names, such as a job process that died without a report.
enum class CauseKind : std::uint8_t {
  connection_closed,
  silence,
  send_stalled,
  malformed,
  device_lost,
  aborted,
  exception,
  interrupted,
  other,
};
inline constexpr std::size_t cause_kind_count = 9;

// The label a kind has in /metrics and /status ("connection_closed", "silence", ...).
std::string_view cause_label(CauseKind kind);

// The kind of a root cause as the remote layer words it: "PEER aborted: REASON",
// "PEER: closed its connection", "PEER: sent nothing for 10 s", "PEER: a send made no progress
// for 10 s", "...malformed message: ...", "interrupted", "unknown exception". A PEER's name never
// holds ": ", so an abort's REASON, the peer's text, cannot make the cause read as another kind.
CauseKind classify_cause(std::string_view cause);

// Facts of the daemon fixed at its start.
struct AgentFacts {
  std::string version;
  std::string commit;
  std::string address;  // where it listens for controllers, HOST:PORT
  std::string kinds;    // --kinds, "CPU,SIM"
  std::string arch;     // the host's arch
  long pid = 0;
  std::int64_t started_unix_ms = 0;
};

// One device of this machine as the daemon's probe found it (device_probe.hpp).
struct DeviceFact {
  std::string name;  // "SIM:0", "CUDA:3"
  std::string arch;  // "sim", "sm_90"
  std::uint64_t budget_bytes = 0;
};

// What the probe of this machine's devices found: its devices, and why a kind it could not open
// failed, in --kinds order.
struct ProbedDevices {
  std::vector<DeviceFact> devices;
  std::vector<std::string> problems;
};

// The state behind the endpoint. Owner: the daemon (main). Threads: the daemon's main thread
// writes (job_process_started, job_process_ended); the metrics thread renders; one lock, held only
// to copy or update a few fields, never across I/O. Lifetime: the daemon's; `page` outlives it.
class Metrics {
 public:
  Metrics(AgentFacts facts, JobPage* page);

  // A job process for job `job` is about to start; its page is cleared (no job process runs).
  void job_process_started(std::uint64_t job);
  // The job process of `job` has ended and been reaped. `report` is its report ("closed",
  // "failed CAUSE"), empty if it wrote none; `death` the cause to use when a job it started left
  // no report (how the process ended). A job process no controller came to is no job.
  void job_process_ended(std::uint64_t job, std::string_view report, std::string_view death);

  // The probe of this machine's devices ended with what it found.
  void devices_probed(ProbedDevices probed);

  std::string prometheus_text() const;
  std::string status_json() const;

 private:
  struct Last {
    std::uint64_t job = 0;
    bool closed = false;
    std::string cause;
    CauseKind kind = CauseKind::other;
    std::int64_t ended_unix_ms = 0;
  };
  // A copy of the state, taken under the lock, that the renderings format without it.
  // Traffic by the peer's role: controller, agent.
  struct Traffic {
    std::uint64_t sent_bytes = 0, received_bytes = 0, sent_messages = 0, received_messages = 0;
  };
  // What the jobs' work amounted to: counts that only grow, summed over every job process.
  struct Work {
    std::uint64_t handshakes_wrong_key = 0, handshakes_malformed = 0, handshakes_timed_out = 0,
                  connections_refused = 0;
    std::uint64_t submissions = 0, copies = 0, copy_bytes = 0, rail_rounds_sent = 0,
                  rail_bytes_sent = 0, rail_rounds_arrived = 0, rail_bytes_arrived = 0,
                  rail_rounds_host_read = 0;
  };
  struct Snapshot {
    std::uint64_t job = 0;  // the job process's job, 0 before the first
    bool process_running = false;
    bool serving = false;
    std::int64_t serving_since_unix_ms = 0;
    std::string controller;
    std::uint64_t processes_started = 0;
    std::uint64_t jobs_started = 0;
    std::uint64_t closed = 0;
    std::uint64_t failed = 0;
    std::array<std::uint64_t, cause_kind_count> failures{};
    std::optional<Last> last;
    std::array<Traffic, 2> traffic{};
    std::array<std::int64_t, 2> last_received_ms{};  // steady clock; 0: nothing from that role yet
    Work work;
    std::uint64_t devices_open = 0;  // of the job being served
    std::uint64_t memory_bytes = 0;
    std::vector<std::string> agents;  // likewise, once its controller named them
    // The job's memory by device, for the devices it holds (the host's among them).
    std::vector<std::pair<std::string, std::uint64_t>> device_memory;
    std::optional<ProbedDevices> probed;  // none until the probe has ended
  };
  Snapshot snapshot() const;

  const AgentFacts facts_;
  JobPage* const page_;
  mutable std::mutex mu_;
  std::uint64_t job_ = 0;
  bool process_running_ = false;
  std::uint64_t processes_started_ = 0;
  std::uint64_t jobs_ended_ = 0;  // jobs a controller started that have ended
  std::uint64_t closed_ = 0;
  std::uint64_t failed_ = 0;
  std::array<std::uint64_t, cause_kind_count> failures_{};
  std::optional<Last> last_;
  std::array<Traffic, 2> ended_traffic_{};  // of the job processes that have ended
  Work ended_work_{};                       // likewise
  std::optional<ProbedDevices> probed_;
};

// Milliseconds since the Unix epoch, now.
std::int64_t unix_ms_now();
// "2026-12-02T00:40:00Z" for `unix_ms`.
std::string utc_text(std::int64_t unix_ms);

}  // namespace rig::rigd
