// The controller's side of a job.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "remote/controller/proxy.hpp"
#include "remote/controller/runtime.hpp"
#include "remote/job/job.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

class ControllerJob;

// One agent of a job as the controller sees it. Loop thread, but for the fields set before start.
struct Member {
  std::string name;       // "HOST:PORT", "HOST:PORT#2" or a launcher's NAME
  std::string dial_text;  // "HOST:PORT" as the other agents dial it
  sockaddr_storage address{};
  Connection* connection = nullptr;
  bool ready = false;
  bool closed = false;
  std::string host_arch;
  std::uint64_t host_budget = 0;
  std::shared_ptr<rig::detail::DeviceCore> host;
  // The machine's devices by the agent's id (0: the host), and what its agent owes, in order.
  std::map<std::uint32_t, std::shared_ptr<rig::detail::DeviceCore>> devices;
  std::deque<Expect> expects;
};

// What a Job handle refers to. Owner: the handles and the host proxies (weakly). Threads: any for
// the synchronised fields; `core` only on the loop thread.
struct JobState {
  std::shared_ptr<JobOutcome> outcome = std::make_shared<JobOutcome>();
  std::mutex mu;
  std::vector<Device> hosts;  // set once, before `started`
  // devices(): the proxies of each (machine, kind) opened so far. Guarded by mu.
  std::map<std::pair<std::size_t, std::string>, std::vector<Device>> opened;
  Signal started;
  Signal finished;  // every connection has closed
  // Per agent, whether its connection is sending a message that did not fit the kernel's buffer
  // at once; a submit waits while it is. Set by the loop; `send_progress` wakes the waiters.
  std::unique_ptr<std::atomic<bool>[]> sending;
  std::size_t sending_count = 0;
  std::atomic<std::uint32_t> send_progress{0};
  std::atomic<bool> close_sent{false};
  std::atomic<bool> closed{false};
  pid_t pid = 0;
  Timing timing;
  int report_fd = -1;  // a launcher's report descriptor, or -1
  std::atomic<bool> report_started{false};
  std::atomic<bool> report_ended{false};
  ControllerJob* core = nullptr;  // loop thread only; null once finished

  // Launcher reports: each line once, in one write, never from a child of fork.
  void report_started_line();
  void report_failed(const std::string& cause);
  void report_closed();
  std::optional<std::string> fork_cause() const;
};

// Owner: itself (it deletes itself once finished); made by connect on the loop thread. Threads:
// the loop thread only.
class ControllerJob final : public JobCore {
 public:
  ControllerJob(Reactor& reactor, const Timing& timing, Key key, std::shared_ptr<JobState> state,
                std::vector<Member> members);
  ~ControllerJob() override;

  void start();
  // Sends one write to agent `index`: a message and the frames after it. `expect`, unless empty
  // (a FREE, an UNLOAD), joins what the agent owes. If the job has failed or closed, a round
  // trip's reply learns so at once.
  // `keep` holds the memory the pieces point at until the write is done or given up.
  void send(std::size_t index, Bytes owned, rig::detail::PoolVector<Connection::Piece> pieces,
            std::optional<Expect> expect, std::shared_ptr<const void> keep = {});
  // Sends CLOSE to every agent.
  void close();

 private:
  void on_proven(Connection& c) noexcept override;
  void on_refused(Connection& c, const std::string& why) noexcept override;
  void on_job_message(Connection& c, Message&& m) noexcept override;
  void on_job_bulk(Connection& c, std::uint8_t type,
                   std::span<const std::uint8_t> bytes) noexcept override;
  std::span<std::uint8_t> bulk_sink(Connection& c, std::uint8_t type,
                                    std::size_t bytes) noexcept override;
  void on_bulk_placed(Connection& c, std::uint8_t type, std::size_t bytes) noexcept override;
  // DATA bytes for the copies of the work `c`'s agent reports next; `from` null: bulk_sink put
  // them in place already.
  void receive_data(Connection& c, std::uint8_t type, std::size_t bytes, const std::uint8_t* from);
  // An answer of the agent: it must be what the head of its queue expects.
  void answer(Connection& c, Member& member, Expect::Kind kind, Message&& m);
  std::vector<Device> opened(Member& member, std::size_t index, const Opened& o);
  void on_job_failed(const std::string& cause) noexcept override;
  void on_finished() noexcept override;
  void started();
  void tick(std::int64_t now);

  std::shared_ptr<JobState> state_;
  std::vector<Member> members_;
  const JobId id_;
  std::size_t proven_ = 0;
  std::size_t ready_ = 0;
  std::int64_t join_sent_ms_ = 0;
  bool closing_ = false;
  std::uint64_t ticker_ = 0;
};

// Starts a job with named members (connect names them by address, launched by RIG_REMOTE_AGENTS).
Result<Job> connect_named(const Key& key, std::vector<Member> members, const Timing& timing,
                          int report_fd = -1);

}  // namespace rig::remote
