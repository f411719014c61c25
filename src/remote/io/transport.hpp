// The seam under a connection: one connected byte stream, whatever carries it. A Connection speaks
// only to this interface, so the same handshake, framing, liveness and ending run over TCP
// (tcp_transport), over an in-memory pair in one thread (memory_transport) and through injected
// faults (fault_transport). The rules are libuv's stream rules, which every implementation keeps:
//
//  - A transport calls its events only from its own callbacks (the loop's, a pump's, a ticker's),
//    never from inside a call its user made on it: a user may do anything in an event, but destroy
//    the transport, which it may do only after on_closed (or if it was never started).
//  - Writes complete in the order they were made, each exactly once; at close, the writes still
//    queued complete with UV_ECANCELED before on_closed.
//  - Status codes are libuv's: 0, or a negative error such as UV_EOF, UV_ECONNRESET, UV_EPIPE. The
//    in-memory transports report the codes a TCP socket would, so a connection words every end
//    the same whatever carries it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "remote/io/tcp_state.hpp"

namespace rig::remote {

// One piece of a write, read from where it lies until the write is done.
struct Slice {
  const std::uint8_t* data;
  std::size_t bytes;
};

// What Transport::write returns when part of the write waits in the transport: on_written
// follows. 0 means the whole write was handed on (no on_written follows); a negative code, that it
// failed and nothing of it is queued.
inline constexpr int write_queued = 1;

// What a transport reports to its user, a connection. Threads: the loop thread.
class TransportEvents {
 public:
  // A dialing transport is connected (0), or could not connect (an error code).
  virtual void on_connected(int status) noexcept = 0;
  // Where the next bytes read go: a buffer of at least one byte, valid until on_read or
  // on_read_end. `suggested` is what the transport would like to read at once.
  virtual std::span<std::uint8_t> read_buffer(std::size_t suggested) noexcept = 0;
  // `bytes` bytes were read into the buffer read_buffer gave last (0: none after all; the buffer
  // is given back).
  virtual void on_read(std::size_t bytes) noexcept = 0;
  // Reading has ended and stopped: UV_EOF after the peer's half-close, otherwise the error.
  virtual void on_read_end(int status) noexcept = 0;
  // The oldest write that returned write_queued is done: 0 once its bytes are handed on,
  // UV_ECANCELED at a close, or the error.
  virtual void on_written(int status) noexcept = 0;
  // A shutdown() is done: every queued write went before it.
  virtual void on_shutdown(int status) noexcept = 0;
  // The transport is closed: its user may destroy it now.
  virtual void on_closed() noexcept = 0;
  // The transport's own code threw inside one of its callbacks (guard.hpp): `what` is the text.
  // The transport is still open; its user decides (a connection fails, then closes it).
  virtual void on_transport_error(const std::string& what) noexcept = 0;

 protected:
  ~TransportEvents() = default;
};

// Owner: one connection (or a decorator the connection owns), which destroys it after on_closed.
// Threads: the loop thread only (or the one thread of a simulation). Lifetime: from its factory to
// on_closed; a transport never started may be destroyed at any time.
class Transport {
 public:
  virtual ~Transport() = default;

  // Whether the transport is still to connect: start() then connects and reports on_connected.
  // Otherwise it is connected already (a socket a listener accepted).
  virtual bool dialing() const noexcept = 0;
  // Hands every later event to `events`; a dialing transport begins to connect. 0, or an error
  // code: the transport must then be closed, and on_connected never comes.
  virtual int start(TransportEvents& events) = 0;
  // Starts (or resumes) delivering reads. 0, or an error code.
  virtual int read_start() = 0;
  // Stops delivering reads until read_start; bytes wait in the transport meanwhile.
  virtual void read_stop() = 0;

  // Writes `slices` in order behind everything written before: as much as can go at once goes at
  // once, the rest waits here. 0, write_queued, or an error code (see write_queued). The slices'
  // bytes must stay where they are until the write is done; the span itself only during the call.
  virtual int write(std::span<const Slice> slices) = 0;
  // The socket's descriptor, for writes by another thread while nothing is queued here
  // (direct_lane.hpp), or -1: a transport whose writes must all pass through write() (a
  // simulation's, one that injects faults) has none.
  virtual int native_fd() const noexcept { return -1; }
  // Ends this side of the stream once every queued write has gone (the peer then reads EOF);
  // on_shutdown follows. 0, or an error code (then nothing follows).
  virtual int shutdown() = 0;
  // Closes the stream, dropping what is queued: on_written(UV_ECANCELED) for each queued write,
  // then on_closed. Idempotent.
  virtual void close() = 0;
  // Ends the stream abruptly, as a reset from the network would: both ends' reads end with
  // UV_ECONNRESET and what was in flight is lost. The transport stays open until close().
  virtual void reset() = 0;

  // Bytes written and still waiting in the transport, not yet handed on.
  virtual std::size_t queued_bytes() const noexcept = 0;
  // What the peer has acknowledged, and what was handed on but not yet acknowledged (the send
  // rule's progress); false if the transport cannot say.
  virtual bool send_state(TcpSendState& out) const noexcept = 0;
  // Bytes that arrived from the peer and wait to be read (in the kernel, for TCP); 0 if none, or
  // if the transport cannot say.
  virtual std::size_t unread_bytes() const noexcept = 0;
  // The peer's address as "IP:PORT" ("[IPv6]:PORT"), or "?" if unknown.
  virtual std::string peer_address() const = 0;
};

}  // namespace rig::remote
