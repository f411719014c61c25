// A connection's socket as another thread than the loop's may read it: host code on an agent that
// waits for a rail's next round reads the round off the socket itself, as a blocking TCP reader
// would, instead of sleeping until the loop has read it, placed it and woken it. On one core that
// hand-off was two of the four context switches of each half of a host-code ping-pong, and the
// loop's wake-up a third (bench/README.md, "Session 27"). The loop lends the socket only while
// nothing of it is half read, and only to a reader that asked; the reader takes only what it
// knows to be its own (the rail's next chunks), and gives the socket back, with every byte it read
// and did not take, at the first frame of anything else, at the socket's end, or when the loop
// asks for it. DirectLane is the same exception to one loop per connection, for writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "remote/io/counters.hpp"
#include "remote/io/reactor.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

class Connection;

// Owner: shared by the connection (which opens, lends, takes back and closes it), the rails that
// read through it, and a reader while it reads. Threads: claim, read_more, bytes, consume, release
// and request from a reader's thread (never a signal handler: a reader may block); the rest on the
// loop thread. A lock guards the state; a reader holds the lane (not the lock) from claim to
// release, and the loop neither reads the socket nor touches the lane's bytes meanwhile. The
// reader reads a descriptor of its own (a dup of the socket's) and sleeps on it and on an eventfd
// the loop writes when it wants the lane back, so a reader never holds up the loop and never
// reads a descriptor that may have been reused. Lifetime: as long as any holder.
class ReadLane : public std::enable_shared_from_this<ReadLane> {
 public:
  enum class State {
    loop,       // the loop reads the socket
    lent,       // lent: a reader may claim it
    reading,    // a reader holds it
    returning,  // a reader gave it back: the loop takes it at its next look (posted)
    closed,
  };
  // What read_more found.
  enum class Read { bytes, wanted_back, ended };

  // Loop thread: a lane for the socket `fd`, whose readers post to `reactor` and count what they
  // read into `counts` (null: not counted). Null if the descriptors could not be made.
  static std::shared_ptr<ReadLane> open(int fd, Reactor& reactor, ConnectionCounters::Role* counts,
                                        Connection* connection);
  ~ReadLane();
  ReadLane(const ReadLane&) = delete;
  ReadLane& operator=(const ReadLane&) = delete;

  // --- the loop's ---
  // What a request (below) runs on the loop, with the reader's `key`.
  void on_request(std::function<void(std::uint64_t key)> fn) { on_request_ = std::move(fn); }
  // What a reader's giving back runs on the loop (the connection takes the socket back), while
  // the connection is open.
  void on_back(std::function<void()> fn) { on_back_ = std::move(fn); }
  // Lends the socket to readers of `key`, `holder` kept alive while lent. The connection has
  // stopped reading, and has no bytes of a frame begun.
  void lend(std::uint64_t key, std::shared_ptr<void> holder);
  // Takes the socket back: true if the loop has it now, with the frames readers passed on and then
  // the bytes they read and did not take moved onto the end of `out`; false while a reader is at
  // it, which is asked to give it back and then posts to the connection (on_back).
  bool take_back(Bytes& out);
  // The same, but only from no reader: false, and nothing asked of it, while a reader is at the
  // socket (it reads what waits there itself). For the loop's own looks, which must not cut a
  // reader off inside a frame: a reader asked to stop inside a rail chunk's body leaves the rest of
  // the body on the socket, which the loop can then only read as a malformed frame.
  bool take_back_idle(Bytes& out);
  State state() const;
  // Asks a reader at it now to give the lane back (it posts it); any thread but a reader's.
  void want_back();
  // Moves the frames readers passed on (defer) onto the end of `out`.
  void take_deferred(Bytes& out);
  // Whether readers hold bytes they read and did not take (while lent).
  bool holds_bytes() const;
  // The bytes readers read since the last call: what the connection's liveness and counters see.
  std::uint64_t take_bytes_read() noexcept { return read_bytes_.exchange(0); }
  // No reader from now on; one reading is woken and gives the lane up.
  void close();
  Connection* connection() const noexcept { return connection_; }

  // Brackets the loop's hand-over of each write to the kernel (its writev: beginning, end). A
  // reader that takes a round waits out a hand-over under way (after_loop_writes): host code that
  // takes an answer for a sign that its own earlier round left (and rewrites that round's source)
  // is right, and a race detector, which knows nothing of the network between the two, sees the
  // loop's read of the source ordered before the rewrite too. The rest of a write the kernel did
  // not take at once is not waited for: it leaves only as the peer reads, and two readers each
  // waiting for their own loop's rest would wait for ever (neither loop reads a lent socket).
  void loop_writing() noexcept { loop_writes_.fetch_add(1, std::memory_order_relaxed); }
  void loop_wrote() noexcept { loop_writes_.fetch_add(1, std::memory_order_release); }
  // Such a rest handed over at last (the count stays even): published for a reader that looks
  // after it.
  void loop_finished_write() noexcept { loop_writes_.fetch_add(2, std::memory_order_release); }

  // --- a reader's ---
  // Asks the loop to lend the socket for `key`, unless it is lent or asked for already: the loop
  // answers by lending it (and waking the reader's sleep, its owner's part) or not at all.
  void request(std::uint64_t key) noexcept;
  // Takes the lane if it is lent for `key`: then its holder, and the reader holds the lane until
  // release; else null.
  void* claim(std::uint64_t key);
  // The reader's bytes: read and not yet taken.
  const std::uint8_t* data() const noexcept { return bytes_.data() + taken_; }
  std::size_t size() const noexcept { return bytes_.size() - taken_; }
  void consume(std::size_t n) noexcept { taken_ += n; }
  // Passes the next `n` bytes (whole frames) on to the loop, which handles them at its next look
  // (take_deferred), before anything the lane gives back: news for the loop that need not send the
  // lane back (a count of a rail whose source this end is).
  void defer(std::size_t n);
  // Waits until the socket has bytes (or the loop wants the lane back), and appends what it has,
  // up to `max` bytes; or, with `to` given, reads up to `to.size()` bytes straight there
  // (`got` says how many), for a body the reader places itself.
  Read read_more(std::size_t max);
  Read read_into(std::span<std::uint8_t> to, std::size_t& got);
  // Ends a read. `give_back`: the loop must have the socket (a frame the reader does not take, the
  // socket's end): posted to the connection, which reads on from the first byte left. Else the
  // lane stays lent, with what the reader left, for the next reader.
  void release(bool give_back);
  // Returns once no write of the loop's to the socket is under way (see loop_writing).
  void after_loop_writes() const noexcept;

 private:
  explicit ReadLane(Reactor& reactor) : reactor_(reactor) {}
  // Waits for the socket or the loop's call; false if the loop wants the lane back.
  bool wait_readable();
  // Looks again and again for a while before the reader sleeps (read_lane_spin_ns): whether
  // `look` found what it looks for.
  template <typename Look>
  bool spin(Look&& look);
  void post_back() noexcept;
  // take_back's part once no reader is at the lane: under the lock, lent or returning.
  void take_back_locked(Bytes& out, std::shared_ptr<void>& drop);
  void close_descriptors() noexcept;  // under the lock, with no reader at them

  Reactor& reactor_;
  mutable std::mutex mu_;
  State state_ = State::loop;
  std::uint64_t key_ = 0;
  std::shared_ptr<void> holder_;
  std::atomic<bool> wanted_back_{false};
  std::atomic<bool> requested_{false};
  bool close_at_release_ = false;  // closed while a reader held it
  int fd_ = -1;                    // the lane's own descriptor of the socket
  int wake_ = -1;                  // eventfd: the loop wants the lane back
  ConnectionCounters::Role* counts_ = nullptr;
  std::atomic<std::uint64_t> read_bytes_{0};
  std::atomic<std::uint64_t> loop_writes_{0};  // odd while the loop writes
  Bytes bytes_;                                // a reader's, then the loop's at take_back
  Bytes deferred_;                             // frames for the loop, in the order read
  std::size_t taken_ = 0;
  std::function<void(std::uint64_t)> on_request_;
  std::function<void()> on_back_;
  Connection* connection_ = nullptr;  // the loop's alone
  friend struct ReadLaneCommand;
};

}  // namespace rig::remote
