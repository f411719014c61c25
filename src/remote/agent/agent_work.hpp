// The agent's side of a job's work: the controller's messages applied one after another through
// this process's rig, on the agent's own devices, and the answers sent back in order.
#pragma once

#include <signal.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "remote/agent/agent_rails.hpp"
#include "remote/io/connection.hpp"
#include "remote/io/reactor.hpp"
#include "remote/limits.hpp"
#include "remote/wire/messages.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

// A copy from the controller's memory is staged as its bytes arrive, in pieces: the first of up to
// this much, each later one as large as all that came before it. A SUBMIT's declared size thus
// makes an agent take at most this much, or as much again as has come, ahead of the bytes. A copy
// within the bound that flow control keeps in flight is one piece; a larger one is copied piece by
// piece to its place at its turn.
inline constexpr std::size_t staging_piece_bytes_min = inflight_bytes_max;
// A copy whose turn has come while its bytes still arrive (nothing before it is left to run, see
// AgentWork::place_early) is staged in pieces of this size instead, each handed to the device as
// soon as it is full: the device's copy of one piece runs while the next is received, and a
// piece whose copy is done serves again for a later one.
inline constexpr std::size_t staging_piece_bytes_early = 4 * MiB;
// A copy into the controller's memory from memory this process does not address (a GPU's) is
// staged in pieces, the first of this size and each next one twice the one before, up to
// staging_piece_bytes_early: a piece's bytes are sent as soon as the device has copied it, while it
// copies the next. Staged whole, a 1 MiB copy from an H100 sent its first byte only after the
// GPU's copy of all of it, 44 us of its 187 (bench/README.md). A copy of less than two first
// pieces is staged whole.
inline constexpr std::size_t back_piece_bytes_first = 256 * 1024;

// The sizes of the pieces of a copy of `bytes` into the controller's memory, in order.
std::vector<std::size_t> back_pieces(std::uint64_t bytes);

struct Helper;

// Owner: the agent's job (AgentProtocol), on serve's stack. Threads: the loop thread (serve's
// caller), but for one helper thread (started at the first call it takes) that runs, one at a
// time, what may take long: an opener, a buffer's make, a program's load, the join of a copy
// staged in several pieces, and the sleep on a device's timeline once polling has not seen a
// submission's work done. It wakes the loop when
// the call returns, so that heartbeats, handshakes and aborts go on meanwhile. Lifetime: the
// job's; shut() closes its handles before the loop ends. The helper thread holds only what its
// call captured: a call still running when the job ends goes on there, and what it returns is
// dropped.
//
// Every message applies after the work of the one before it is done (the order the controller
// relies on: work sent to a machine follows all work sent to it before), but for a rail's round:
// once its RAIL_GO or RAIL_EXPECT applies, later messages go on beside it, unless they use its
// memory (AgentRails::holds), which they wait for. Messages that arrive meanwhile wait in order;
// bulk bytes are staged in this process's memory as they arrive, but for a SUBMIT whose turn has
// come (place_early): its bytes go to their place as they arrive.
// Host memory that bulk bytes pass through between the connection and a device, kept for the
// next copies (see staging_cache_bytes_max). Owner: AgentWork, shared with the writes that still
// send from its buffers. Threads: the loop. Lifetime: the job's, or its last such write's.
class StagingCache {
 public:
  // A buffer of at least `bytes`: a kept one no more than twice as large (so that a small copy
  // does not hold a large buffer), or a new one. Raises what Buffer::make raises.
  Buffer take(std::size_t bytes);
  // `b` is no longer used by any work or write: kept if there is room.
  void give_back(Buffer b);
  void clear();
  std::size_t kept_bytes() const noexcept { return cached_bytes_; }

 private:
  std::multimap<std::size_t, Buffer> free_;  // by size
  std::size_t cached_bytes_ = 0;
};

class AgentWork {
 public:
  using Fail = std::function<void(const std::string& cause)>;

  // `program_signals`: the signal mask the program's own code (openers) runs with, the one serve
  // was called with; empty: the helper thread keeps the mask it starts with (the loop thread's).
  AgentWork(Reactor& reactor, const std::vector<std::pair<std::string, Opener>>& kinds, Fail fail,
            std::optional<sigset_t> program_signals = std::nullopt);
  ~AgentWork();
  AgentWork(const AgentWork&) = delete;
  AgentWork& operator=(const AgentWork&) = delete;

  // Where answers go: the controller's connection, once it has proven the key.
  void set_controller(Connection* c) {
    controller_ = c;
    rails_.set_controller(c);
  }
  // The job's rails on this machine, for what arrives for them on any connection.
  AgentRails& rails() { return rails_; }

  // A message of the controller's work (OPEN, MAKE, FREE, LOAD, UNLOAD, SUBMIT, and a rail's RAIL,
  // RAIL_GO, RAIL_EXPECT, RAIL_END).
  void message(Message&& m);
  // PAYLOAD bytes: the program of a LOAD, or the bytes of a SUBMIT's copies from the controller.
  // `bytes` of them at `from`, or, with `from` null, placed already where payload_sink said.
  void payload(std::size_t bytes, const std::uint8_t* from);
  // Where the next `bytes` PAYLOAD bytes go, if they go to one place (else empty).
  std::span<std::uint8_t> payload_sink(std::size_t bytes);
  // Notices a device of the job lost other than by a close (called on every tick).
  void tick();
  // The controller closed the job: once every message before the close is applied, lets go of the
  // job's memory and programs, closes its devices, then runs `done`.
  void close(std::function<void()> done);
  // The job failed or ended: nothing more is applied or sent, and the loop handles close.
  void shut();

  static bool handles(const Message& m) {
    return std::holds_alternative<Open>(m) || std::holds_alternative<Make>(m) ||
           std::holds_alternative<Free>(m) || std::holds_alternative<Load>(m) ||
           std::holds_alternative<Unload>(m) || std::holds_alternative<Submit>(m) ||
           std::holds_alternative<RailMake>(m) || std::holds_alternative<RailGo>(m) ||
           std::holds_alternative<RailExpect>(m) || std::holds_alternative<RailAwait>(m) ||
           std::holds_alternative<RailEnd>(m);
  }

 private:
  // A SUBMIT's copy from the controller's memory, staged in pieces as its bytes arrive
  // (staging_piece_bytes_min says how large): each a staging buffer and the copy's bytes it holds.
  struct Staged {
    std::uint64_t bytes = 0;  // the copy's, as the SUBMIT declares
    std::uint64_t dst = 0;    // the destination's memory and offset there, as the SUBMIT says
    std::uint64_t dst_offset = 0;
    std::uint64_t received = 0;
    std::vector<std::pair<Buffer, std::size_t>> pieces;  // not yet handed to the device
    std::size_t last_filled = 0;                         // of the last piece
    std::uint64_t handed = 0;  // of the copy's bytes, those copied by pieces handed early
    // Where the bytes are read to when they go straight to the destination (memory of this
    // machine the process addresses itself, its copy's turn come): no staging at all.
    std::span<std::byte> direct;
  };
  // A message waiting its turn, with the bytes staged for it.
  struct Op {
    Message message;
    std::vector<Staged> staged;  // a SUBMIT's copies from the controller, in part order
    std::size_t staging = 0;     // the one whose bytes come now
    // A LOAD's program, in the pieces it came in: held only as its bytes arrive, never ahead of
    // them at the size the LOAD declares (joined into one off the loop, at the load).
    std::vector<std::vector<std::byte>> program;
    std::uint64_t program_due = 0;  // the program's bytes still to come
    // Placed early (place_early, which looks once, at the op's first byte): the copies' bytes go
    // to the device as they come.
    bool placing_decided = false;
    bool early = false;
    std::uint64_t early_value = 0;  // on the SUBMIT's device, of the last piece handed
    // Pieces handed, by their value; those before handed_done have served and gone back. A vector,
    // not a deque: an empty std::deque allocates, and every op has one of these.
    std::vector<std::pair<std::uint64_t, Buffer>> handed;
    std::size_t handed_done = 0;
    bool complete() const { return staging == staged.size() && program_due == 0; }
  };
  // The submission whose work runs now.
  struct Running {
    Device device;
    std::uint64_t local_value = 0;
    std::uint32_t device_id = 0;
    std::uint64_t value = 0;
    std::vector<Buffer> staged{};  // the controller's bytes this work copies from
    // Writes of bytes for the controller's memory straight from host buffers of the job (copies at
    // the head of the SUBMIT): until they are done, no later work may change those buffers.
    std::size_t writes_from_memory = 0;
    // Bytes for the controller's memory, in order: each piece staged, and sent once the device
    // has reached its value; those before back_sent have gone. The copies of a SUBMIT's work go
    // at its end; one large copy alone goes in pieces as the device copies them (send_in_pieces).
    struct BackPiece {
      std::uint64_t local_value;
      Buffer staging;     // a kept buffer may be larger than its piece
      std::size_t bytes;  // what goes back of it
    };
    std::vector<BackPiece> back{};
    std::size_t back_sent = 0;
  };

  void pump();
  bool idle() const {
    return !running_ && !then_ && !rails_.busy() && queue_.empty() && !receiving_;
  }
  void release();
  void apply(Op& op);
  void open(const Open& m);
  // The opener of `kind` returned `got`, or threw (`got` empty, `threw` its text).
  void opened(const std::string& kind, std::optional<Result<std::vector<Device>>> got,
              const std::string& threw);
  void make(const Make& m);
  void load(const Load& m, Op& op);
  void submit(const Submit& m, Op& op);
  // Writes a SUBMIT of nothing but copies into the controller's memory from memory this process
  // addresses (direct_bytes) straight from there, if it is one; the work runs until the write is
  // done.
  bool send_from_memory(const Submit& m);
  // The buffer part `p` copies into the controller's memory from, if it is such a copy and within
  // the buffer; otherwise nullptr, and the SUBMIT's own turn takes it (and says why it refuses).
  const Buffer* copy_back_source(const WirePart& p) const;
  // Runs a SUBMIT of one large copy into the controller's memory from a device's memory in pieces
  // (back_pieces), if it is one.
  bool send_in_pieces(const Submit& m);
  // Sends the pieces of the running copy (Running::back) that the device has `reached`, in order.
  void send_back_pieces(std::uint64_t reached);
  // The operator's counts of a SUBMIT whose work is on its way (or done, its bytes in place).
  static void count_submission(const Submit& m);
  // A last piece with room for the staged copy's next bytes: the one there, or a new one; the
  // error's text if none can be taken.
  std::optional<std::string> room_for_bytes(Op& op, Staged& s);
  // Before the first of a SUBMIT's bytes: whether its copies from the controller may be placed
  // as their bytes come, i.e. no work before them is left here (the SUBMIT is the only message
  // waiting, nothing runs, no rail round holds it) and nothing of the SUBMIT comes before them.
  // Then each goes straight into its destination if that is host memory of this machine, else
  // through pieces handed to the device one by one (hand_piece).
  void place_early(Op& op);
  // The full last piece of `s` handed to the SUBMIT's device as a copy of its own.
  void hand_piece(Op& op, Staged& s);
  void watch();
  void check_running();
  // Has the helper thread sleep on the running work's device until its next piece to send (a copy
  // back in pieces) or its end, then looks at it on the loop.
  void wait_off_loop();
  void finish_running();
  // Tells the controller that `device` has reached `value` (the SUBMIT of that value is done).
  void reached(std::uint32_t device, std::uint64_t value);
  void fail(const std::string& cause);
  // fail() for a device of the job found lost: counted as such for an operator.
  void device_lost(const std::string& cause);
  Device* device(std::uint32_t id, std::string_view message);
  Buffer* memory(std::uint64_t id, std::string_view message);

  // Polls the running work's timeline (on_idle), or hands it to the helper thread once polling
  // has run its budget.
  void poll_running();
  // Runs `call` on the helper thread, then `then` on the loop once it has returned; no message
  // applies meanwhile. `call` must not throw, and must reach nothing of the job's but what it
  // captured by value: the job may end while it runs.
  void off_loop(std::function<void()> call, std::function<void()> then);
  // The loop's side of the helper's wake-up.
  void helper_returned();

  static void on_idle(uv_idle_t* idle) noexcept;
  static void on_async(uv_async_t* async) noexcept;

  Reactor& reactor_;
  const std::vector<std::pair<std::string, Opener>>& kinds_;
  Fail fail_;
  Connection* controller_ = nullptr;
  bool shut_ = false;
  bool receiving_ = false;  // the last queued op still takes PAYLOAD bytes
  bool pumping_ = false;    // pump() is applying a message: a call from within it returns
  std::deque<Op> queue_;
  std::optional<Running> running_;
  std::function<void()> then_;      // set while a call runs on the helper thread
  std::function<void()> closing_;   // the controller's close, waiting for the work before it
  std::int64_t poll_since_ns_ = 0;  // rig::detail::steady_ns() when its device work was handed in
  std::int64_t last_work_ms_ = 0;   // when a message was last applied (the staging cache's idle)
  std::shared_ptr<StagingCache> staging_ = std::make_shared<StagingCache>();

  std::map<std::uint32_t, Device> devices_;                   // 0: this machine's host
  std::map<std::string, std::vector<std::uint32_t>> opened_;  // kind -> ids, in the agent's order
  std::map<std::uint64_t, Buffer> memory_;
  std::map<std::uint64_t, Image> images_;
  std::uint32_t next_device_ = 1;
  std::uint64_t next_memory_ = 1;
  std::uint64_t next_image_ = 1;

  // What a write's completion reaches this work through: null once the work is gone.
  std::shared_ptr<AgentWork*> self_ = std::make_shared<AgentWork*>(this);
  uv_idle_t idle_{};
  uv_async_t async_{};
  std::optional<sigset_t> program_signals_;
  std::shared_ptr<Helper> helper_;
  AgentRails rails_;
};

}  // namespace rig::remote
