// A transport that breaks another on command: bytes dropped, delayed or corrupted, one direction
// stalled or closed, the stream reset. It wraps any transport (an in-memory end in tests and
// simulations, a TCP socket if need be) and is itself one, so a connection over it runs unchanged.
// Faults are explicit calls; a simulation draws them from its seed. Without a fault active, bytes
// and events pass straight through (a read still lands in the connection's own buffer).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remote/io/reactor.hpp"
#include "remote/io/transport.hpp"

namespace rig::remote {

// Owner: a connection (Transport); whoever injects the faults keeps a pointer, valid until the
// connection's on_closed. Threads: the loop thread. Lifetime: the inner transport lives inside;
// the same rules as any transport. Delayed and held bytes move on the reactor's ticks (poll()).
class FaultTransport final : public Transport, private TransportEvents {
 public:
  enum class Flow : std::uint8_t {
    out,  // what this end writes
    in,   // what this end reads
  };

  FaultTransport(std::unique_ptr<Transport> inner, Reactor& reactor);
  ~FaultTransport() override;
  FaultTransport(const FaultTransport&) = delete;
  FaultTransport& operator=(const FaultTransport&) = delete;

  // While on, the bytes of `flow` vanish (a write reports them handed on; a read never sees them).
  void drop(Flow flow, bool on);
  // The bytes of `flow` arrive `ms` later than they would (0: no delay); their order is kept.
  void delay(Flow flow, std::int64_t ms);
  // While on, `flow` stops: out, writes wait here (queued_bytes grows, the peer acknowledges
  // nothing); in, this end reads nothing, so the peer's writes back up.
  void stall(Flow flow, bool on);
  // The byte at `offset` of `flow`, counted from the first byte that passed here, is XORed with
  // `mask` when it passes.
  void corrupt(Flow flow, std::uint64_t offset, std::uint8_t mask = 0xff);
  // Ends `flow` now: out, a half-close (the peer reads EOF after what went before; later writes
  // fail with UV_EPIPE); in, this end reads EOF at once, and what arrives later is discarded.
  void shut(Flow flow);
  // Runs what is due: delayed bytes, writes a stall held, events this transport owes. Each tick
  // of the reactor calls it; a simulation may call it too.
  void poll();

  // Transport
  bool dialing() const noexcept override { return inner_->dialing(); }
  int start(TransportEvents& events) override;
  int read_start() override;
  void read_stop() override;
  int write(std::span<const Slice> slices) override;
  int shutdown() override;
  void close() override;
  // The inner stream is reset; what this transport held in flight is lost with it.
  void reset() override;
  std::size_t queued_bytes() const noexcept override;
  bool send_state(TcpSendState& out) const noexcept override;
  std::size_t unread_bytes() const noexcept override;
  std::string peer_address() const override { return inner_->peer_address(); }

 private:
  struct Corruption {
    std::uint64_t offset;
    std::uint8_t mask;
  };
  // Bytes on their way out, held here (a copy: the writer may reuse its memory at once).
  struct Held {
    std::vector<std::uint8_t> bytes;
    std::int64_t due_ms;
    bool writer_waits;  // a stalled write: its on_written comes when it is handed on
  };
  // A write handed to the inner transport that it queued.
  struct InnerWrite {
    bool for_writer;                  // its completion is one the writer waits for
    std::vector<std::uint8_t> bytes;  // what it writes from, for a copy made here
  };
  // Bytes on their way in, delayed; or the read's end (`end` nonzero).
  struct Arriving {
    std::vector<std::uint8_t> bytes;
    std::size_t at = 0;
    std::int64_t due_ms;
    int end = 0;
  };

  // TransportEvents, from the inner transport.
  void on_connected(int status) noexcept override;
  std::span<std::uint8_t> read_buffer(std::size_t suggested) noexcept override;
  void on_read(std::size_t bytes) noexcept override;
  void on_read_end(int status) noexcept override;
  void on_written(int status) noexcept override;
  void on_shutdown(int status) noexcept override;
  void on_closed() noexcept override;
  void on_transport_error(const std::string& what) noexcept override;

  static void apply(std::vector<Corruption>& corruptions, std::uint64_t offset,
                    std::span<std::uint8_t> bytes) noexcept;
  static bool hits(const std::vector<Corruption>& corruptions, std::uint64_t offset,
                   std::size_t bytes) noexcept;
  // Hands held bytes that are due to the inner transport; `from_writer` (inside a write) stops at
  // a write the writer waits for, whose completion may not be reported from inside its call.
  void flush_out(bool from_writer);
  void deliver_in();
  void end_reading(int status);
  void report_throw(const std::string& what) noexcept;

  std::unique_ptr<Transport> inner_;
  Reactor& reactor_;
  std::uint64_t ticker_ = 0;
  TransportEvents* events_ = nullptr;
  bool closed_ = false;

  bool out_drop_ = false, out_stall_ = false, out_shut_ = false;
  std::int64_t out_delay_ms_ = 0;
  std::uint64_t out_offset_ = 0;
  std::vector<Corruption> out_corrupt_;
  std::deque<Held> held_;
  std::size_t held_waiting_bytes_ = 0;
  std::deque<InnerWrite> inner_writes_;
  bool inner_shutdown_wanted_ = false;  // once held_ is empty
  bool inner_shutdown_issued_ = false;
  std::optional<int> inner_shutdown_status_;
  bool writer_shutdown_ = false;  // the writer asked for a shutdown and waits for on_shutdown
  std::optional<int> owed_shutdown_;

  bool in_drop_ = false, in_stall_ = false, in_shut_ = false;
  std::int64_t in_delay_ms_ = 0;
  std::uint64_t in_offset_ = 0;
  std::vector<Corruption> in_corrupt_;
  std::deque<Arriving> arriving_;
  bool reader_wants_ = false;  // read_start without read_stop
  bool read_ended_ = false;    // the reader has had on_read_end
  bool owed_eof_ = false;
  std::vector<std::uint8_t> scratch_;  // where reads go that the reader must not see yet
  std::span<std::uint8_t> read_into_;  // the buffer the last read_buffer gave
  bool into_scratch_ = false;
};

}  // namespace rig::remote
