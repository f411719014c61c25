// What a job process tells its daemon while it runs, for the metrics endpoint: a page of atomics
// in a memfd the daemon maps before it starts the job process, which maps it too (--metrics-fd).
//
// Shared memory rather than a pipe: the job process's loop only stores into it (a relaxed atomic
// store never waits, whatever the daemon does), nothing is framed or parsed, and the daemon reads
// the latest values when a scrape comes, not a stream it must keep draining. Lock-free atomics are
// address-free, so they are right across processes (as log.hpp's LogLosses are). Only what fits
// in fixed fields is here: text of bounded length (the controller's address), never a peer's bytes
// unbounded.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remote/io/counters.hpp"
#include "remote/job/work_counters.hpp"

namespace rig::rigd {

// The longest controller address kept: an IPv6 address in brackets and a port is 47 bytes.
inline constexpr std::size_t job_page_address_bytes_max = 64;
// The job's agents' names as kept, one per line: a job of a few dozen agents with short names;
// past it the list ends with the last whole name that fits.
inline constexpr std::size_t job_page_agents_bytes_max = 2048;

// Owner: the daemon, which makes it in a memfd and clears it before each job process starts (none
// runs then). Threads: the job process writes (its loop's thread and the agent log's callers); the
// daemon's metrics thread reads. Lifetime: the daemon's; a job process maps it for its own.
struct JobPage {
  // 1 once a controller has started a job (release: the fields below are written first).
  std::atomic<std::uint32_t> started{0};
  std::atomic<std::int64_t> started_unix_ms{0};
  rig::remote::SharedText<job_page_address_bytes_max> controller;
  // The job's agents as the controller named them (printable: no line break within a name), one
  // per line; empty until the controller has named them.
  rig::remote::SharedText<job_page_agents_bytes_max> agents;
  // What the job's connections carried (the job process hands these to the remote layer).
  rig::remote::ConnectionCounters connections;
  // What the job's work amounted to (likewise handed to the remote layer).
  rig::remote::WorkCounters work;

  // Called by the job process once, when a controller has started the job.
  void start(std::string_view controller_address, std::int64_t unix_ms) {
    controller.store(controller_address);
    started_unix_ms.store(unix_ms);
    started.store(1, std::memory_order_release);
  }
  // Called by the job process once the controller has named the job's agents.
  void set_agents(const std::vector<std::string>& names) {
    std::string lines;
    for (const std::string& name : names) {
      if (lines.size() + name.size() + 1 >= job_page_agents_bytes_max) break;
      lines += name;
      lines += '\n';
    }
    agents.store(lines);
  }
  // The agents' names, once named.
  std::vector<std::string> agent_names() const {
    std::vector<std::string> out;
    const std::string lines = agents.load();
    std::size_t from = 0;
    for (std::size_t nl; (nl = lines.find('\n', from)) != std::string::npos; from = nl + 1) {
      out.push_back(lines.substr(from, nl - from));
    }
    return out;
  }
  // The daemon, while no job process runs.
  void clear() {
    started.store(0);
    started_unix_ms.store(0);
    controller.clear();
    agents.clear();
    connections.clear();
    work.clear();
  }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::int64_t>::is_always_lock_free &&
                  std::atomic<char>::is_always_lock_free,
              "the job page is shared between processes: its atomics must be lock-free");

}  // namespace rig::rigd
