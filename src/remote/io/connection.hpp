// One connection between two processes of a job: the handshake, framing, heartbeats and
// deadlines, the write queue, and the orderly or failed ending (abort, half-close, drain, close).
// It speaks to its byte stream only through a Transport (transport.hpp): TCP in real jobs, memory
// in tests and simulations.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remote/io/direct_lane.hpp"
#include "remote/io/liveness.hpp"
#include "remote/io/reactor.hpp"
#include "remote/io/read_lane.hpp"
#include "remote/io/timing.hpp"
#include "remote/io/transport.hpp"
#include "remote/trust/handshake.hpp"
#include "remote/wire/frame.hpp"
#include "remote/wire/messages.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

class Connection;

// What a connection reports to the job it belongs to. Every call comes on the loop thread from
// inside a callback of its transport or of the reactor; none may throw.
class ConnectionOwner {
 public:
  virtual ~ConnectionOwner() = default;
  // The handshake proved the key both ways; peer() says who is there. A listener's connection
  // calls admit() first, for the agent's decision on the job.
  virtual std::optional<JobId> serving_job(Connection&) noexcept { return std::nullopt; }
  virtual void on_proven(Connection& c) noexcept = 0;
  // A message after the handshake, while the connection is open.
  virtual void on_message(Connection& c, Message&& m) noexcept = 0;
  // A PAYLOAD or DATA frame's bytes, borrowed from the connection until the call returns.
  virtual void on_bulk(Connection& c, std::uint8_t type,
                       std::span<const std::uint8_t> bytes) noexcept = 0;
  // Where the body of a bulk frame of `bytes` goes, if it goes whole to one place the owner knows
  // already (a copy's destination): the connection then reads it there straight from the socket,
  // and reports it with on_bulk_placed instead of on_bulk. Empty: it comes through on_bulk. The
  // memory must stay valid while the connection is open.
  virtual std::span<std::uint8_t> bulk_sink(Connection&, std::uint8_t, std::size_t) noexcept {
    return {};
  }
  // The `bytes` of a bulk frame whose body bulk_sink placed are all in place.
  virtual void on_bulk_placed(Connection&, std::uint8_t, std::size_t) noexcept {}
  // The connection failed, or the peer ended it, before this side ended it: `cause` is a root cause
  // naming the peer ("NAME: closed its connection"). The connection is already ending.
  virtual void on_failed(Connection& c, const std::string& cause) noexcept = 0;
  // The handshake was refused or timed out: `why` follows the peer's name and ": ".
  virtual void on_refused(Connection& c, const std::string& why) noexcept = 0;
  // The handle is closed: the owner may now destroy the connection.
  virtual void on_closed(Connection& c) noexcept = 0;
};

// Owner: a job (through its ConnectionOwner), which destroys it after on_closed. Threads: the loop
// thread only. Lifetime: from dial() or adopt() to on_closed; it owns its transport, whose handle
// must not move or die before then. dial() or adopt() must follow the construction at once: a
// connection without a transport has nothing that could report its close.
class Connection final : private TransportEvents {
 public:
  enum class State : std::uint8_t {
    connecting,   // dialing: the TCP connect is pending
    handshaking,  // proving the key
    open,         // messages flow
    ending,       // this side has ended: final messages go out, then half-close and drain
    closing,      // uv_close issued
    closed,
  };

  Connection(Reactor& reactor, ConnectionOwner& owner, const Timing& timing, std::string peer_name);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects over `transport`, one that is dialing (Transport::dialing), and proves the key as
  // `hs`'s dialer. A failure to connect is the handshake's refusal ("cannot connect: ...").
  void dial(std::unique_ptr<Transport> transport, Handshake hs);
  // Takes over `transport`, connected already (a socket or an in-memory end a listener accepted),
  // and proves the key as `hs`'s listener. Returns 0, or an error code: the connection then closes
  // itself and the transport.
  int adopt(std::unique_ptr<Transport> transport, Handshake hs);
  // The same over TCP: dials `address` (resolved already), or takes over `fd`.
  void dial(const sockaddr* address, Handshake hs);
  int adopt(int fd, Handshake hs);

  // Queues `m` behind everything queued before it. Only while open.
  void send(const Message& m);
  // Sends `m` in this connection's next write, or once the loop is idle (Reactor::when_idle),
  // whichever comes first: for news no peer waits for (a rail's count of rounds host code
  // started), which then costs no write of its own on the way of one a peer does wait for. Only
  // while open; what is still held when the connection ends goes before its final message.
  void send_lazy(const Message& m);
  // send_lazy, but the loop going idle does not send it: only this connection's next write, or
  // later_news_delay_ms (Reactor::after_news_delay). For news that no peer waits for at all (a
  // count that another message says too, or that only a look at the word would read), which on a
  // shared core would otherwise cost a write of its own every round.
  void send_later(const Message& m);
  // Sends `m` in this connection's next write, or at the end of the loop's turn
  // (Reactor::at_turn_end), whichever comes first: for messages that come in bursts (a round's
  // count per round of a batch the loop read at once), so that a burst costs one write, not one
  // each.
  void send_soon(const Message& m);
  // send_soon, but if the message held last (nothing held after it, no write since) went through
  // here with the same `key`, `m` takes its place: for news that says all the one before it said
  // (a device's timeline reached a later value), so that a burst costs one message, not one each.
  void send_soon_covering(const Message& m, std::uint64_t key);
  // Queues a frame whose body is `head` followed by `payload`, which is sent from where it lies
  // (scatter-gather) and must stay valid until `done` runs (on the loop thread, once the bytes are
  // handed to the kernel or the connection has given up on them).
  void send_gather(std::span<const std::uint8_t> head, std::span<const std::uint8_t> payload,
                   std::function<void()> done);

  // One piece of a write: `bytes` at `external` (caller memory, valid until `done`), or, with
  // `external` null, at `offset` in the write's own bytes.
  struct Piece {
    const std::uint8_t* external;
    std::size_t offset;
    std::size_t bytes;
  };
  // Queues one write of `pieces`, in order, behind everything queued before it; `owned` is kept
  // by the connection until the write is done. Only while open (else `done` runs at once).
  void send_pieces(Bytes owned, std::span<const Piece> pieces, std::function<void()> done);
  // send_soon for a message encoded already: `pieces` of `owned` (all of it when there are none).
  // A piece in caller memory cannot wait (its `done` says when the memory is free), so such a
  // message goes at once, as send_pieces sends it.
  void send_soon(Bytes owned, std::span<const Piece> pieces);

  // Ends this side: sends `final_message` if given (an ABORT or a CLOSE), half-closes, then reads
  // and discards until the peer ends its side, `drain_timeout_ms` after the end (or after the final
  // message left, if later), or `silence_timeout_ms` after the peer's last byte; then closes.
  void end(const std::optional<Message>& final_message);
  // Closes at once, dropping what is queued (a refused handshake or a process tearing down).
  void close_now();
  // A listener's connection still awaiting the dialer's proof: tells the dialer that this agent is
  // ending its job (Handshake::turn_away), then closes at once. Any other connection just closes.
  void turn_away();

  State state() const noexcept { return state_; }
  // Whether the peer has ended its side (EOF seen).
  bool peer_ended() const noexcept { return peer_ended_; }
  const std::string& peer_name() const noexcept { return peer_name_; }
  void set_peer_name(std::string name) { peer_name_ = std::move(name); }
  const Peer& peer() const { return handshake_->peer(); }
  // A dialing connection's: the instance id in the listener's greeting, once it arrived.
  std::optional<InstanceId> greeting_instance() const {
    return handshake_ ? handshake_->greeting_instance() : std::nullopt;
  }
  // The peer's address as "IP:PORT" ("[IPv6]:PORT"), or "?" once unknown.
  std::string peer_address() const;
  // Bytes queued to send and not yet handed to the kernel.
  std::size_t backlog_bytes() const noexcept;
  // Called with true when a write could not go to the kernel whole and waits in the transport,
  // and with false once that queue is empty again: while true, the connection "is sending".
  void set_sending_watch(std::function<void(bool sending)> watch) {
    sending_watch_ = std::move(watch);
  }

  // The lane through which other threads may write to this connection's socket while it has
  // nothing queued or held (direct_lane.hpp): opened with the connection, or at once if it is open
  // (once proven, as an agent gives lanes only to the connections of its job); none: no caller
  // writes.
  void set_direct_lane(std::shared_ptr<DirectLane> lane);
  const std::shared_ptr<DirectLane>& direct_lane() const noexcept { return lane_; }
  // What a caller's write through the lane could not hand to the kernel: written now, before
  // everything that the loop has queued since, then the rest of that queue. Open or ending.
  void write_rest(Bytes rest);
  // The same for a rest a caller posted itself (post_rest): a throw fails the connection.
  void on_posted_rest(Bytes rest) noexcept;
  // Takes the lane from callers until this connection's next write is done (the owner is about
  // to queue a message whose place among the callers' must be fixed first).
  void hold_lane() noexcept { (void)claim_lane(); }

  // The lane through which a reader on another thread may read this connection's socket
  // (read_lane.hpp): made at the first call, over a socket only (null otherwise, or once closed).
  std::shared_ptr<ReadLane> read_lane();
  // Lends the socket to the lane's readers of `key` (`holder` kept alive meanwhile), if nothing of
  // it is half read here: reading stops until the lane comes back, at the first frame a reader
  // does not take, or at the watch's first look (every read_lane_watch_ms) that finds bytes
  // waiting and no reader. Whether it was lent. Loop thread.
  bool lend_reads(std::uint64_t key, std::shared_ptr<void> holder);
  // Runs at every look of the watch: while the socket is lent, and once after it came back. The
  // owner reports what the readers took.
  void on_read_lane_watch(std::function<void()> fn) { read_lane_watch_ = std::move(fn); }
  // A reader gave the lane back (posted by the lane).
  void on_read_lane_back() noexcept;

  // Opaque per-connection data for the owner (an index, a role).
  std::uint64_t tag = 0;

 private:
  // A write that waits in the transport, until its on_written: what it writes from, and who waits.
  struct Write {
    Bytes owned;
    std::function<void()> done;
    bool final_message;
    Bytes lazy;  // send_lazy's messages, written before `owned`
  };

  // TransportEvents: each runs its body through guard(), a throw becoming thrown().
  void on_connected(int status) noexcept override;
  std::span<std::uint8_t> read_buffer(std::size_t suggested) noexcept override;
  void on_read(std::size_t bytes) noexcept override;
  void on_read_end(int status) noexcept override;
  void on_written(int status) noexcept override;
  void on_shutdown(int status) noexcept override;
  void on_closed() noexcept override;
  void on_transport_error(const std::string& what) noexcept override;
  // What an exception thrown in a callback means now: during the handshake its refusal, once
  // open the connection's failure ("NAME: what"), while ending the close.
  void thrown(const std::string& what) noexcept;

  void start();  // once the transport is connected: reading, then the handshake
  void received(std::size_t bytes);
  // A read of `bytes` in the loop's current turn: once this turn's large reads have run for a tick,
  // reading stops, and goes on at the loop's next turn, after its timers.
  void share_turn(std::size_t bytes);
  void read_ended(int status);
  void written(int status);
  void handshake_bytes(std::span<const std::uint8_t> bytes);
  // Handles the decoder's whole frames. `fresh`: read off the socket now, so the loop polls for
  // what follows (note_activity); false for frames a reader passed on (watch_reads), news up to a
  // watch late that says nothing of traffic to come.
  void frame_bytes(bool fresh = true);
  // Asks the owner where a partly received bulk frame's body goes, and reads it there if it can.
  void try_sink();
  void flush_handshake();
  // Writes `pieces` (or all of `owned` when there are none) behind what send_lazy and send_soon
  // held: the socket first, a request for the rest. While a caller's rest is due, waits behind it.
  void write_buffers(Bytes owned, std::span<const Piece> pieces, std::function<void()> done);
  // write_buffers' own part: `lazy`, then `pieces` of `owned`.
  void write_now(Bytes lazy, Bytes owned, std::span<const Piece> pieces,
                 std::function<void()> done);
  // The lane is the loop's while it writes or holds bytes, and the callers' again once nothing is
  // queued, held or waiting behind a rest.
  // Returns whether a caller's rest is due (the loop's writes then wait for write_rest).
  bool claim_lane() noexcept { return lane_ && lane_->claim(); }
  void release_lane_if_idle() noexcept;
  void open_lane() noexcept;  // as the connection opens, or when given a lane once open
  // send_lazy's and send_later's shared part: in the lane's news if it takes it, else hold().
  void hold_news(const Message& m, bool Connection::*queued,
                 void (Reactor::*flush_at)(std::function<void()>));
  // Holds `m` for the next write, and unless `queued` says one is, asks the reactor for a flush
  // at `flush_at` (what send_lazy, send_later and send_soon share).
  void hold(const Message& m, bool Connection::*queued,
            void (Reactor::*flush_at)(std::function<void()>));
  // What has just been put in lazy_: unless `queued` says one is, asks the reactor for a flush.
  void flush_held_at(bool Connection::*queued, void (Reactor::*flush_at)(std::function<void()>));
  void flush_lazy();  // the held messages, in a write of their own
  // Whether held news (send_lazy, send_later, send_soon) waits for a write (here or in the lane).
  bool holds_news() const noexcept;
  void tick(std::int64_t now_ms);
  void fail(const std::string& cause);
  // Why a handshake that did not finish in time failed: what it still lacked.
  std::string handshake_timeout_text() const;
  void broken(int uv_code);  // a write or read error, reported as the state calls for
  void drain_check(std::int64_t now_ms);
  void close_handle();
  // The lent socket's watch: readers' bytes for liveness, the owner's look, and the lane taken
  // back if bytes wait with no reader.
  void watch_reads();
  void arm_read_watch();  // the watch's next look, unless one is due already
  // Takes the socket back from the lane, unless a reader is at it: that one gives it back itself
  // (on_read_lane_back) at the first frame that is not its rail's.
  void take_reads_back();
  // The lane is back with `left` (bytes its readers read and did not take): reading goes on.
  void reads_back(Bytes left);

  Reactor& reactor_;
  ConnectionOwner& owner_;
  const Timing timing_;
  std::string peer_name_;
  std::unique_ptr<Transport> transport_;
  State state_ = State::connecting;
  std::optional<Handshake> handshake_;
  std::vector<std::uint8_t> handshake_buf_;
  FrameDecoder decoder_;
  // A bulk frame's body being read straight to its destination (empty when none is).
  std::span<std::uint8_t> sink_;
  std::size_t sink_done_ = 0;
  std::uint8_t sink_type_ = 0;
  // The last read filled a sink: the next asks for a header's worth (after_sink_read_bytes).
  bool after_sink_ = false;
  Liveness liveness_;
  // Reading has stopped until the loop's next turn (share_turn). libuv reads a ready socket up to
  // 32 times before its loop goes on: where each megabyte took long to place (130 ms on a loaded
  // machine under TSan), a rail's destination read for a second with no tick, so no heartbeat.
  bool reads_yielded_ = false;
  // A silence verdict was put off one tick because the peer's bytes waited unread (on_tick).
  bool silence_spared_ = false;
  std::int64_t started_ms_;
  std::int64_t ended_ms_ = 0;  // when this side ended, or its final message left, if later
  std::uint64_t ticker_ = 0;
  std::deque<Write> writes_;   // those waiting in the transport, oldest first: they finish in order
  std::vector<Slice> slices_;  // one write's slices, kept for the next write
  std::size_t last_backlog_ = 0;
  std::uint64_t last_acked_ = 0;
  bool final_message_pending_ = false;
  Bytes lazy_;  // held news (send_lazy, send_later, send_soon), for the next write
  bool lazy_flush_queued_ = false;   // a flush_lazy is queued with the reactor for its idle time
  bool later_flush_queued_ = false;  // and for later_news_delay_ms
  bool soon_flush_queued_ = false;   // and for the end of its turn
  // The message send_soon_covering held last: where it begins and ends in lazy_ and its key. It
  // may be replaced only while it still ends lazy_ (covering_end_ 0: none is).
  std::size_t covering_at_ = 0;
  std::size_t covering_end_ = 0;
  std::uint64_t covering_key_ = 0;
  // Cleared when this goes, for the reactor's work that outlives it.
  std::shared_ptr<Connection*> self_ = std::make_shared<Connection*>(this);
  bool peer_ended_ = false;
  bool shutdown_done_ = false;
  bool refused_ = false;          // the handshake was refused: closed once the verdict has gone
  bool end_when_proven_ = false;  // end() came during the handshake, with a final message
  std::optional<Message> final_when_proven_;
  bool handle_open_ = false;  // a transport is there and not yet closing
  std::function<void(bool)> sending_watch_;
  std::shared_ptr<DirectLane> lane_;
  std::shared_ptr<ReadLane> read_lane_;
  bool reads_lent_ = false;  // the read lane has the socket: the transport is not reading
  bool read_watch_armed_ = false;
  std::function<void()> read_lane_watch_;
  // Writes that came while a caller's rest was due, in order, each with what was held before it.
  struct Deferred {
    Bytes lazy;
    Bytes owned;
    std::vector<Piece> pieces;
    std::function<void()> done;
    bool final_message;
  };
  std::deque<Deferred> deferred_;
  bool shutdown_after_rest_ = false;  // end() came while a rest was due: shut down once it went
};

// Appends to a write the frames of type `type` (PAYLOAD or DATA) that carry `bytes` from where
// they lie, chunk_bytes at most per frame: each frame's header goes into `owned`, its bytes stay in
// the caller's memory. Nothing is appended for no bytes.
void add_bulk_frames(Bytes& owned, rig::detail::PoolVector<Connection::Piece>& pieces,
                     std::uint8_t type, std::span<const std::uint8_t> bytes);

// "10 s", "0.25 s": a duration in the root causes, exact for the scaled times tests use.
std::string seconds_text(std::int64_t ms);

// Any thread but the loop's, after a `part` outcome: posts the rest of the caller's message
// (`rest`, the bytes try_write did not write) to the loop, which hands it to the lane's connection
// (Connection::write_rest) if that is still there. From the block pool: safe in a signal handler.
// False if no memory was left for it: the connection then stalls, and its peer's deadline fails
// the job.
bool post_rest(Reactor& reactor, std::shared_ptr<DirectLane> lane,
               std::span<const std::uint8_t> rest) noexcept;

}  // namespace rig::remote
