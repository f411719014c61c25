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

#include "remote/io/counters.hpp"
#include "remote/job/work_counters.hpp"

namespace rig::rigd {

// The longest controller address kept: an IPv6 address in brackets and a port is 47 bytes.
inline constexpr std::size_t job_page_address_bytes_max = 64;

// Owner: the daemon, which makes it in a memfd and clears it before each job process starts (none
// runs then). Threads: the job process writes (its loop's thread and the agent log's callers); the
// daemon's metrics thread reads. Lifetime: the daemon's; a job process maps it for its own.
struct JobPage {
  // 1 once a controller has started a job (release: the fields below are written first).
  std::atomic<std::uint32_t> started{0};
  std::atomic<std::int64_t> started_unix_ms{0};
  std::atomic<char> controller[job_page_address_bytes_max]{};
  // What the job's connections carried (the job process hands these to the remote layer).
  rig::remote::ConnectionCounters connections;
  // What the job's work amounted to (likewise handed to the remote layer).
  rig::remote::WorkCounters work;

  // Called by the job process once, when a controller has started the job.
  void start(std::string_view controller_address, std::int64_t unix_ms) {
    const std::size_t n = std::min(controller_address.size(), job_page_address_bytes_max - 1);
    for (std::size_t i = 0; i < n; ++i) controller[i].store(controller_address[i]);
    controller[n].store('\0');
    started_unix_ms.store(unix_ms);
    started.store(1, std::memory_order_release);
  }
  // The controller's address, once started.
  std::string controller_address() const {
    std::string out;
    for (const auto& c : controller) {
      const char ch = c.load();
      if (ch == '\0') break;
      out.push_back(ch);
    }
    return out;
  }
  // The daemon, while no job process runs.
  void clear() {
    started.store(0);
    started_unix_ms.store(0);
    for (auto& c : controller) c.store('\0');
    for (auto* r : {&connections.controller, &connections.agent}) {
      r->sent_bytes.store(0);
      r->received_bytes.store(0);
      r->sent_messages.store(0);
      r->received_messages.store(0);
      r->last_received_ms.store(0);
    }
    for (auto* f : {&work.devices_open, &work.memory_bytes, &work.submissions, &work.copies,
                    &work.copy_bytes, &work.rail_rounds_sent, &work.rail_bytes_sent,
                    &work.rail_rounds_arrived, &work.rail_bytes_arrived}) {
      f->store(0);
    }
    work.device_lost.store(0);
    for (auto* f : {&connections.handshakes_wrong_key, &connections.handshakes_malformed,
                    &connections.handshakes_timed_out, &connections.connections_refused}) {
      f->store(0);
    }
  }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::int64_t>::is_always_lock_free &&
                  std::atomic<char>::is_always_lock_free,
              "the job page is shared between processes: its atomics must be lock-free");

}  // namespace rig::rigd
