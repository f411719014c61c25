// A connection's socket as another thread than the loop's may write to it: one small message,
// while the loop has nothing of its own queued or held for that connection. A submission then
// leaves from the thread that made it, without waiting for the loop's turn (the post, the loop's
// wake-up and its write were most of an empty submission's time beyond the network's round trip:
// bench/README.md, "Session 17"), and a round host code starts on an agent leaves from host code's
// thread. Everything else still goes through the loop: a caller that finds the lane taken posts its
// message as before, and what a caller's write could not hand to the kernel whole is written by the
// loop before anything else of that connection. News that may wait (Connection::send_lazy) waits
// in the lane itself, for whichever write comes first, a caller's or the loop's: so that a lane
// stays free while the loop holds such news, and the news costs no write of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "remote/io/counters.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

class Connection;

// Owner: shared by the connection (which opens and closes it) and the job's state, through which
// submitters (or an agent's host code, through its rails) reach it. Threads: try_write and
// post_rest from any thread but the loop's, a signal handler's included; everything else on the
// loop thread. A lock guards the state, the news carried and every write to the socket through the
// lane, so a caller's write and the loop's never interleave; a caller only tries it (one that finds
// it held writes nothing: so a handler that interrupted its holder cannot deadlock), and holds it
// only for one non-blocking send. Lifetime: as long as either holder; closed by the connection
// before its socket is, so that no caller writes to a descriptor that may be reused.
class DirectLane {
 public:
  enum class Wrote {
    none,  // the lane was not free: nothing written, nothing run
    all,   // the bytes are with the kernel
    part,  // `written` bytes are; the loop must write the rest (rest_due) before anything else
  };
  struct Outcome {
    Wrote wrote = Wrote::none;
    std::size_t written = 0;
  };

  // Writes `bytes` if the lane is free, having run `before(context)` first under the lane's lock
  // (where the caller hands the loop what it needs to know before the answer can come), behind
  // the news the lane carries (in one write). On `part`, `written` counts only `bytes`' own, and
  // the lane stays the loop's until rest_written. Never blocks, never allocates.
  Outcome try_write(std::span<const std::uint8_t> bytes, void (*before)(void*),
                    void* context) noexcept;

  // Loop thread. `connection` is open on `fd` (-1: it has none a caller could write to, as in a
  // simulation): the loop holds the lane until its first release. Callers count what they write
  // into `counts` (null: not counted).
  void open(int fd, ConnectionCounters::Role* counts, Connection* connection = nullptr) noexcept;
  // The loop is about to write or hold bytes for this connection: callers' writes wait for
  // release (one already under way finishes first). Returns rest_due(), read under the same lock;
  // unless a rest is due, moves the news the lane carries onto the end of `carried` (if given),
  // for the loop's write to send first.
  bool claim(Bytes* carried = nullptr) noexcept;
  // Loop thread. Keeps `news` for the next write, the loop's or a caller's, if the lane is free or
  // the loop's; false (nothing kept) while closed or while a rest is due, when only the loop writes
  // and the news waits with the connection as before.
  bool carry(std::span<const std::uint8_t> news) noexcept;
  bool carries() const noexcept;
  // Loop thread: the connection a caller's rest goes to (post_rest, connection.hpp), until the lane
  // closes for good.
  Connection* connection() const noexcept { return connection_; }
  // The connection has nothing queued or held: callers may write again (not while a rest is due).
  void release() noexcept;
  // A caller's write stopped partway: the loop's next write on this connection is its rest,
  // behind what is left of the news the lane carried (take_carried).
  bool rest_due() const noexcept;
  // Loop thread: moves what the lane carries onto the end of `out`, whatever its state.
  void take_carried(Bytes& out) noexcept;
  // That rest has been handed to the connection's queue, in front of everything else.
  void rest_written() noexcept;
  // No caller writes from now on; with `keep_rest`, a rest still due stays due (the connection
  // ends in order: the rest, then its final message) and the lane closes once it is written.
  void close(bool keep_rest) noexcept;

 private:
  enum class State { closed, free, loop, rest_due };
  // Moves carried_ onto the end of `out`, under the lock.
  void move_carried(Bytes& out) noexcept;
  mutable std::mutex mu_;
  State state_ = State::closed;
  int fd_ = -1;
  ConnectionCounters::Role* counts_ = nullptr;
  bool close_after_rest_ = false;
  // The news for the next write (whole messages; after a partial write, what is left of them).
  Bytes carried_;
  Connection* connection_ = nullptr;  // the loop's alone
};

}  // namespace rig::remote
