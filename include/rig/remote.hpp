// rig::remote: jobs, in which one process (the controller) uses the devices of other machines
// through an agent on each. docs/remote.md is the guide, docs/failure.md the root causes,
// docs/security.md what the key protects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rig/result.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

class Key;

namespace detail {
// The key's bytes, for the handshake's MAC. Not part of the API: nothing else may read them.
std::span<const std::uint8_t> key_bytes(const Key& key) noexcept;
}  // namespace detail

// A job's key: 16 to 4096 secret bytes that every process of a job holds and proves to the others.
// It cannot be printed (no operator<<), its memory is wiped when it is destroyed, and equality runs
// in time independent of the bytes. Make one with key() or read_key().
//
// Owner: whoever holds it; copies are independent and each wipes its own bytes. Immutable, so any
// thread may use one at once. A moved-from Key holds no bytes and may only be destroyed or
// assigned.
class Key {
 public:
  Key(const Key& other);
  Key(Key&& other) noexcept;
  Key& operator=(const Key& other);
  Key& operator=(Key&& other) noexcept;
  ~Key();

  // The number of bytes (not secret: it is in every error about a key).
  std::size_t size() const noexcept { return size_; }

  // Same bytes; for equal sizes it compares in constant time.
  friend bool operator==(const Key& a, const Key& b) noexcept;
  // A key is never printed, not even by accident in a test's failure message.
  friend std::ostream& operator<<(std::ostream& os, const Key& key) = delete;

 private:
  explicit Key(std::span<const std::uint8_t> bytes);
  void wipe() noexcept;

  friend Result<Key> key(std::string_view bytes);
  friend Result<Key> read_key(std::string_view path);
  friend std::span<const std::uint8_t> detail::key_bytes(const Key& key) noexcept;

  std::unique_ptr<std::uint8_t[]> bytes_;
  std::size_t size_ = 0;
};

// `bytes` as a key, or an Error giving its length (never its bytes) if it has fewer than 16 or more
// than 4096.
Result<Key> key(std::string_view bytes);

// The key in the file at `path`, read through a single open(2). The file must be a regular file (a
// FIFO is refused at once, without waiting for a writer), owned by this process's effective user,
// with no permission bits for its group or others, and hold 16 to 4096 bytes. A symbolic link is
// followed, and every check applies to the file actually opened. The Error names the file and the
// reason, never the bytes.
Result<Key> read_key(std::string_view path);

// Jobs, seen from their controller.

class Job;
struct JobState;

// A job: this process (the controller) and one agent on each other machine. A cheap handle; every
// copy refers to the same job. All calls are safe from many threads at once.
class Job {
 public:
  Job() = default;

  // The host of each machine ("CPU@NAME"), in the order of the agents given to connect (or of
  // RIG_REMOTE_AGENTS). Each is a rig::Device of kind CPU.
  const std::vector<Device>& hosts() const;

  // The root cause this process recorded if the job has failed; nothing otherwise (and after a
  // close). Never raises, never waits.
  std::optional<std::string> failed() const;

  // Ends the job in order: closes each host (waiting for the work submitted to its machine), then
  // has every agent close what it opened and stop; returns once every agent has stopped. On a
  // failed job it only closes the hosts. A close of a closed job returns at once. Raises Break if
  // a break is requested (request_break) while it waits; the job then stays open.
  void close();

  explicit operator bool() const noexcept { return s_ != nullptr; }

  explicit Job(std::shared_ptr<JobState> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<JobState> s_;
};

// A proxy of each device of `kind` ("SIM", "CUDA") that the agent of `host`'s machine serves, in
// the agent's order, named "SIM:0@NAME". `host` is one of the hosts() of this process's last job.
// The first call for a kind has the agent open them (one round trip); later calls give the same
// proxies. A proxy's arch and budget are those of the agent's device, and its buffers, copies,
// runs and waits behave as a local device's (docs/remote.md, "Remote devices").
// Error why, starting with the machine's name, if the agent serves no such devices or its opener
// fails; Error with the root cause if the job has failed, or "the job has closed". Raises
// std::invalid_argument if `host` is not a host of this process's last job.
Result<std::vector<Device>> devices(const Device& host, const std::string& kind);

// An agent's address: host (a name or a numeric address) and port.
using Address = std::pair<std::string, int>;

// Starts a job with an agent at each address, all proving `key`; every pair of the job's processes
// connects, each step within 10 s. Error why, why starting with a machine's name and ": " (or
// naming both machines that cannot connect), if an agent cannot be reached, serves another job,
// speaks another protocol version or holds another key; the agents reached learn that the job
// failed. Raises std::invalid_argument if `agents` is empty or lists an address twice, or a job of
// this process is open.
Result<Job> connect(const Key& key, const std::vector<Address>& agents);

// The job a launcher (rig run) set up for this process through RIG_REMOTE_REPORT,
// RIG_REMOTE_AGENTS and RIG_REMOTE_KEY, or nothing if RIG_REMOTE_REPORT is not set. Takes the
// three variables out of the environment and reports "started", "failed WHY" or "closed" on the
// report descriptor.
std::optional<Result<Job>> launched();

// Rails: repeated transfers between host memory of two machines of a job, carried over the job's
// own connection between those two machines' processes, never through a third (docs/rails.md).

// `bytes` from `from` at from_offset to `to` at to_offset.
struct Transfer {
  Buffer from;
  std::size_t from_offset = 0;
  Buffer to;
  std::size_t to_offset = 0;
  std::size_t bytes = 0;
};

// What every count of a failed job's rails is raised to, on every process (RIG_RAIL_RAISED).
inline constexpr std::uint64_t rail_raised = UINT64_MAX;

struct RailCore;

// A rail: a fixed list of transfers, each round carried whole. A cheap handle; every copy refers to
// the same rail, and every call is safe from many threads at once. The rail lives while a handle
// or a run given it (Arg::rail) does, and at most as long as its job.
class Rail {
 public:
  Rail() = default;

  // The host of the source's machine ("CPU@A", or rig::host()), and of the destination's.
  const Device& from() const;
  const Device& to() const;

  // Carries every transfer once more, ordered by memory as a copy is (docs/rails.md): returns the
  // round's number (1, 2, ...) once the round is queued. Blocks only while the source's
  // connection sends an earlier message, or while the rail has more than 64 MiB of rounds not
  // yet arrived. Raises Lost with the root cause once the job has failed, std::invalid_argument
  // once it has closed or once the rail was handed to host code (Arg::rail), whose rounds start
  // where it runs.
  std::uint64_t go();

  // Rounds whose sources may be written again, and rounds whose bytes are all in place: counts
  // that only grow, as this process knows them; rail_raised once the job has failed.
  std::uint64_t sent() const;
  std::uint64_t arrived() const;
  // Return once the count has reached `round`; raise Lost with the root cause once the job has
  // failed (at once if it has).
  void wait_sent(std::uint64_t round) const;
  void wait_arrived(std::uint64_t round) const;

  explicit operator bool() const noexcept { return core_ != nullptr; }
  explicit Rail(std::shared_ptr<RailCore> core) noexcept : core_(std::move(core)) {}
  const std::shared_ptr<RailCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<RailCore> core_;
};

// Makes a rail of `transfers` (one round trip to each agent end, in parallel). Every `from`
// buffer is on one machine's host, every `to` on another's: hosts of this process's open job, or
// rig::host(). Error with the root cause if the job has failed, "the job has closed" once it has;
// std::invalid_argument, nothing sent, for no transfers, a transfer of no bytes, a range outside
// its buffer, overlapping destinations, buffers on more than one machine at one end, both ends on
// one machine, or a buffer not on a host of the job.
Result<Rail> rail(std::span<const Transfer> transfers);

// What code compiled elsewhere may know of a device of a job (the spec's capability records): for
// a host, its machine's name and address and the function that makes rails; for a proxy, its
// machine's and only the agent's id for the device, so that nothing here can build a vendor
// object (a CUDA graph) for it.
struct Record {
  enum class Of : std::uint8_t { host, device };
  Of of = Of::host;
  std::string machine;       // "h100-b", "127.0.0.1:41234"
  std::string address;       // "HOST:PORT" as the controller dialed it
  std::uint32_t device = 0;  // a proxy's id at its agent; 0: host
  Result<Rail> (*make_rail)(std::span<const Transfer>) = nullptr;  // a host's: rail()
};

// The record of `d`, a host or proxy of this process's last job; nothing for any other device.
std::optional<Record> record(const Device& d);

// Agents.

// Raised where a requested break (Ctrl-C) ends a wait of serve or close.
class Break : public std::runtime_error {
 public:
  Break() : std::runtime_error("interrupted") {}
};

// Asks every wait of serve and of Job::close in this process to end with Break within 200 ms.
// Async-signal-safe: call it from a SIGINT handler. catch_break(true) installs such a handler.
void request_break() noexcept;
void catch_break(bool on);

// Opens the devices of one kind for the controller, at its first devices() call for the kind.
using Opener = std::function<Result<std::vector<Device>>()>;

struct AgentState;

// A listening socket for one job's processes. Owner: the caller; move-only.
class Agent {
 public:
  Agent(Agent&&) noexcept;
  Agent& operator=(Agent&&) noexcept;
  ~Agent();

  // The port listened at: the one given to listen, or the one the system chose for 0.
  int port() const;

  explicit Agent(std::unique_ptr<AgentState> s);
  AgentState& state() const { return *s_; }

 private:
  std::unique_ptr<AgentState> s_;
};

// Listens at host and port (0: the system chooses) for the processes of one job that prove `key`.
// Opens no device. Error why if host does not resolve or the process cannot listen there.
Result<Agent> listen(const Key& key, const std::string& host, int port);

// Makes this process the agent of one job: waits for a controller that proves the key, then for the
// job's other agents, runs the work the controller submits, and returns when the job ends: Ok once
// the controller closed it, Error(root cause) once it failed (after failing this process's devices
// with that cause: the process should exit). A second controller is told this agent serves another
// job. Raises std::invalid_argument if `a` served already or `kinds` names a kind twice, Break
// (after failing the job with the cause "interrupted") if a break is requested, and an exception
// that ended one of serve's own steps (after failing the job with its text). Openers, buffer makes
// and program loads run on a helper thread of serve's, so the job's heartbeats go on while they
// run; openers with the signal mask serve was called with. `a` has stopped listening whenever
// serve returns or raises.
Result<Unit> serve(Agent& a, const std::vector<std::pair<std::string, Opener>>& kinds);

}  // namespace rig::remote
