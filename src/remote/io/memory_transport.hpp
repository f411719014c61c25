// Byte streams in memory, for tests and for whole jobs simulated in one process and one thread: a
// MemoryNetwork makes connected pairs of MemoryTransport ends, and moves bytes only when it is
// pumped, so a test decides when anything arrives and nothing depends on the scheduler.
//
// Each direction of a pair holds at most buffer_bytes unread (what a socket's two kernel buffers
// hold between them): a writer whose peer takes nothing fills it, then its writes wait in its own
// end (queued_bytes grows, send_state's acknowledged count stops), which is how a peer that stops
// reading looks over TCP. What TCP does at the end of a stream is kept too:
//  - shutdown(): the peer reads what was written, then EOF;
//  - close() with nothing unread: the same, and what the peer writes later is answered with a
//    reset (its reads end with UV_ECONNRESET after what it had received);
//  - close() with bytes unread (a connection "closed over unread bytes"): a reset, and what the
//    closing end had written and the peer had not yet taken is lost, as a RST loses a socket's
//    unsent bytes;
//  - reset(): both directions lose what is in flight; both ends read UV_ECONNRESET.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "remote/io/transport.hpp"

namespace rig::remote {

class MemoryTransport;

// What one direction of a pair holds unread at most, unless the network is made with another.
inline constexpr std::size_t memory_buffer_bytes_default = 256 * 1024;
// The most events one pump() runs before it returns, so that two ends that answer each other
// forever cannot hang a test.
inline constexpr std::size_t memory_pump_steps_max = 1'000'000;

// Owner: the test or simulation, which keeps it alive longer than every end it made. Threads: one.
class MemoryNetwork {
 public:
  explicit MemoryNetwork(std::size_t buffer_bytes = memory_buffer_bytes_default);
  ~MemoryNetwork();
  MemoryNetwork(const MemoryNetwork&) = delete;
  MemoryNetwork& operator=(const MemoryNetwork&) = delete;

  struct Pair {
    std::unique_ptr<MemoryTransport> dialer;    // dialing: connects at the first pump after start
    std::unique_ptr<MemoryTransport> listener;  // connected already, as an accepted socket is
  };
  // A connected pair; each end's peer_address() is the other's address given here.
  Pair connect(std::string dialer_address, std::string listener_address);
  // A dialing end that cannot connect: on_connected(status) at the first pump after start.
  std::unique_ptr<MemoryTransport> unreachable(int status);

  // Runs what is due (connections, deliveries, write and shutdown completions, closes) until
  // nothing is left or `steps_max` ends have acted; returns how many acted.
  std::size_t pump(std::size_t steps_max = memory_pump_steps_max);

 private:
  friend class MemoryTransport;
  std::size_t buffer_bytes_;
  std::vector<MemoryTransport*> ends_;  // in the order made: the pump's order; null once gone
};

// One end of a pair. Owner: a connection (Transport). Threads: the network's. Lifetime: until its
// owner destroys it, after on_closed; destroyed earlier, it acts as closed to its peer.
class MemoryTransport final : public Transport {
 public:
  ~MemoryTransport() override;
  MemoryTransport(const MemoryTransport&) = delete;
  MemoryTransport& operator=(const MemoryTransport&) = delete;

  bool dialing() const noexcept override { return dialing_; }
  int start(TransportEvents& events) override;
  int read_start() override;
  void read_stop() override;
  int write(std::span<const Slice> slices) override;
  int shutdown() override;
  void close() override;
  void reset() override;
  std::size_t queued_bytes() const noexcept override;
  // Acknowledged: what the peer has taken; unsent: what waits in the direction's buffer.
  bool send_state(TcpSendState& out) const noexcept override;
  std::size_t unread_bytes() const noexcept override;
  std::string peer_address() const override { return peer_address_; }

  // A process that stops reading, or reads again: while held this end takes nothing.
  void hold_reads(bool held) noexcept { held_ = held; }
  // The process this end belongs to, for a simulation: while `*stopped` is true (SIGSTOP) the end
  // acts on nothing (no connect, read, completion or close reaches its user), and its peer's bytes
  // only fill the direction toward it, as a stopped process's socket buffers fill. `stopped` must
  // outlive the end; null (the default): never stopped.
  void follow_process(const bool* stopped) noexcept { stopped_ = stopped; }
  // Every byte this end has handed to the direction toward its peer.
  std::uint64_t bytes_sent() const noexcept;
  // How many writes its user made (each one system call over TCP).
  std::uint64_t writes() const noexcept { return writes_; }

 private:
  struct Link;
  // A write that waits for room: what is left of it, its first slice cut to what is left.
  struct PendingWrite {
    std::vector<Slice> slices;
  };

  MemoryTransport(MemoryNetwork* network, std::shared_ptr<Link> link, int side, bool dialing,
                  std::string peer_address);
  // Acts once in a pump: what is due for this end. False if nothing was.
  bool step();
  // Moves what waits here into the direction toward the peer, as far as room allows.
  bool flush();
  // Copies from the front of `slices` into the outgoing direction as far as room allows; what
  // went is cut away.
  void append(std::vector<Slice>& slices);
  void finish_close();
  // What this end's going away does to the directions: a FIN, or a reset over unread bytes.
  void leave_link() noexcept;

  MemoryNetwork* network_;
  std::shared_ptr<Link> link_;
  int side_;
  bool dialing_;
  std::string peer_address_;
  int connect_status_ = 0;
  TransportEvents* events_ = nullptr;
  bool connect_due_ = false;
  bool reading_ = false;
  bool held_ = false;
  const bool* stopped_ = nullptr;
  bool read_ended_ = false;
  bool shutdown_requested_ = false;
  bool shutdown_reported_ = false;
  bool close_requested_ = false;
  bool closed_ = false;
  std::deque<PendingWrite> pending_;
  std::size_t pending_bytes_ = 0;
  std::size_t done_unreported_ = 0;
  std::uint64_t writes_ = 0;  // writes handed on whose on_written is still to come

  friend class MemoryNetwork;
};

}  // namespace rig::remote
