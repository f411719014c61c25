// The rails a process of a job holds, on its loop: the source's rounds sent over each link, paced
// one chunk at a time so that other messages on the link wait at most one chunk; the
// destination's bytes read straight into its memory; the counts both ends keep. Both roles use
// it: the controller when its own host is an end, an agent for the rails its host is an end of.
// The ordering of rounds with other work (RAIL_GO, RAIL_EXPECT) is the role's (docs/rails.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "remote/io/connection.hpp"
#include "remote/io/direct_lane.hpp"
#include "remote/io/reactor.hpp"
#include "remote/io/read_lane.hpp"
#include "remote/job/rail_count.hpp"
#include "remote/wire/messages.hpp"

namespace rig::remote {

// One rail as this process holds it. Owner: its process's Rails (shared with the writes that
// still send from its memory). Threads: the loop, but for the counts (any thread reads them) and
// what host code's rig_rail_go uses (the atomics, `lane`, `parts` and `id`, none of which change
// while the rail is held).
struct HeldRail {
  std::uint32_t id = 0;
  bool source = false;                      // else this end is the destination
  Connection* link = nullptr;               // to the other end
  std::vector<std::span<std::byte>> parts;  // this end's memory of each transfer
  std::shared_ptr<const void> keep;         // holds that memory
  std::shared_ptr<RailCounts> counts;  // shared with the controller's handle, on the controller

  // Source: rounds the loop has started (queued to send), the highest round the destination said
  // RAIL_READY for, and the rounds waiting for that.
  std::uint64_t started = 0;
  std::uint64_t ready = 0;
  std::deque<std::uint64_t> waiting_ready;
  // The number of the last round given out here, by RAIL_GO or by host code (rig_rail_go).
  std::atomic<std::uint64_t> numbered{0};
  bool ending = false;  // RAIL_END is queued behind the last round
  // Source: the rounds host code writes from its own thread (Rails::write_round). `lane`: the
  // link's (null: none, or rounds too large to go that way). `handed`: the last round whose bytes
  // are all with the link (the loop's) or the kernel (host code's). `direct`: the last round host
  // code wrote. `writing`: host code is writing one, or the loop starts host code's rounds; while
  // one holds it the other leaves the rail's numbering alone.
  std::shared_ptr<DirectLane> lane;
  std::atomic<std::uint64_t> handed{0};
  std::atomic<std::uint64_t> direct{0};
  std::atomic<bool> writing{false};
  // The last round the controller started here (RAIL_GO at a source; at a destination, RAIL_EXPECT,
  // RAIL_AWAIT or a chunk that says so): the controller waits for the counts of rounds up to it, so
  // they go at once; those of rounds host code started ride on a later write (send_lazy).
  std::uint64_t driven = 0;
  // Destination: the source is the controller, which waits for every arrival.
  bool source_waits = false;
  // Destination: the next bytes due (of round arrived + 1). While the link's read lane is lent
  // for this rail, its reader's (Rails::read_rounds), as are the rail's memory and arrived count.
  std::uint32_t due_part = 0;
  std::uint64_t due_offset = 0;
  // Destination: the link's read lane, through which host code that waits for this rail's next
  // round reads it off the socket itself (null: none). Set before host code sees the rail.
  std::shared_ptr<ReadLane> read_lane;
  // Destination: the last round the loop counted and reported (readers take rounds that the loop
  // reports at its next look, Rails::readers_took).
  std::uint64_t reported = 0;
};

// Sends a count of `rail`'s round `round` on `to` as soon as its peer needs it: at the end of the
// loop's turn when the peer waits for it (`waited`); with the connection's next write or about
// 1 ms later for the other rounds the controller started, whose counts nobody waits for; with the
// next write or once the loop is idle for host code's rounds (Connection::send_later, send_lazy).
// Loop thread.
void send_count(Connection& to, const HeldRail& rail, const RailCount& count, bool waited);

// Owner: the role's protocol (or the agent's work). Threads: the loop. Lifetime: the job's; its
// writes in flight hold what they send from, and find it gone without harm.
class Rails {
 public:
  struct Events {
    // The round's sources are read (handed to the kernel): they may be written again.
    std::function<void(HeldRail& rail, std::uint64_t round)> sent;
    // The round's bytes are all in this process's memory.
    std::function<void(HeldRail& rail, std::uint64_t round)> arrived;
    // The rail's end is done with at this process (RAIL_END passed on, or received): it is
    // dropped once this returns.
    std::function<void(HeldRail& rail)> ended;
    // A malformed rail message or another failure: the job fails with this cause.
    std::function<void(const std::string& cause)> fail;
  };

  Rails(Reactor& reactor, Events events);
  ~Rails();
  Rails(const Rails&) = delete;
  Rails& operator=(const Rails&) = delete;

  // Holds rail `id`, counting in `counts` (new ones if null); why not if it cannot (the process
  // holds rails_max rails already). The caller has checked `parts` (none empty).
  std::optional<std::string> add(std::uint32_t id, bool source, Connection& link,
                                 std::vector<std::span<std::byte>> parts,
                                 std::shared_ptr<const void> keep,
                                 std::shared_ptr<RailCounts> counts = nullptr);
  HeldRail* find(std::uint32_t id);
  bool empty() const { return held_.empty(); }
  template <typename F>
  void each(F f) {
    for (auto& [id, rail] : held_) f(*rail);
  }

  // Source: starts round `round`, which must be the next (a mismatch fails the job, naming
  // `who`'s message). With `wait_ready` its bytes go once the destination has said RAIL_READY.
  void go(HeldRail& rail, std::uint64_t round, bool wait_ready, const std::string& who);
  // Source: starts the rounds host code has numbered (rig_rail_go) since the last call, but those
  // it wrote itself.
  void host_go(HeldRail& rail);

  // What write_round did. Any thread.
  struct Written {
    enum class How {
      not_tried,  // nothing numbered: the caller numbers a round and posts it, as before
      posted,     // round `round` is numbered, and the lane was not free: post it to the loop
      all,        // round `round` is with the kernel
      part,       // it is partly: post `rest` (Rails::post_rest) for the loop to finish
    };
    How how = How::not_tried;
    std::uint64_t round = 0;
  };
  // Source, from host code's thread (a signal handler's maybe): numbers the next round and writes
  // it to the link's socket from this thread, if it is small, the link's lane is free and every
  // round before it is on its way already. The round's sources are read (the sent count says so)
  // before this returns, unless `not_tried` or `posted`. `message`: where the round is built, at
  // least direct_write_bytes_max; on `part`, message[rest_at, rest_end) is what is left to write.
  static Written write_round(HeldRail& rail, std::span<std::uint8_t> message, std::size_t& rest_at,
                             std::size_t& rest_end) noexcept;
  // Source: passes RAIL_END on after the last round's bytes, then drops the rail.
  void end(HeldRail& rail);
  // Destination of a round the controller starts: says RAIL_READY to the source.
  void say_ready(HeldRail& rail, std::uint64_t round);

  // What arrives on a link; a malformed one fails the job. (On the controller RAIL_COUNT is the
  // protocol's: it keeps the counts of every rail of its job, an end or not.)
  void on_ready(Connection& from, const RailReady& m);
  void on_chunk(Connection& from, const RailChunk& m);
  // An agent source's: the destination's arrived count.
  void on_count(Connection& from, const RailCount& m);
  void on_end(Connection& from, const RailEnd& m);
  // RAIL_DATA: where its `bytes` go, if to one place (bulk_sink); then their arrival, placed
  // already (`from` null) or at `from`.
  std::span<std::uint8_t> sink(Connection& from, std::size_t bytes);
  void on_data(Connection& from, std::size_t bytes, const std::uint8_t* at);

  // Destination: host code that waits for this rail's rounds may read them off the link's socket
  // itself (ReadLane), if the link has a socket.
  void let_host_read(HeldRail& rail);
  // A reader's thread, host code waiting for round `round` of the rail that `word` counts the
  // arrivals of (key `id`): reads the rounds itself while the loop lends it the socket, else
  // sleeps until they have arrived. The arrived count then seen.
  static std::uint64_t wait_reading(const RailWord& word, ReadLane& lane, std::uint32_t id,
                                    std::uint64_t round) noexcept;

  // Whether a message belongs here.
  static bool handles(const Message& m) {
    return std::holds_alternative<RailReady>(m) || std::holds_alternative<RailChunk>(m) ||
           std::holds_alternative<RailCount>(m) || std::holds_alternative<RailEnd>(m);
  }
  // Routes one of those to its on_* call.
  void on_message(Connection& from, const Message& m);

  // The job has failed: every count raised (waiters wake), nothing more sent or placed.
  void raise_all() noexcept;

 private:
  // A link's outgoing rounds, in the order they became ready to send, and where the head is.
  struct Outgoing {
    struct Item {
      std::shared_ptr<HeldRail> rail;
      std::uint64_t round = 0;  // 0: the rail's RAIL_END
    };
    std::deque<Item> items;
    std::uint32_t part = 0;
    std::uint64_t offset = 0;
    bool pumping = false;
    // A chunk handed to the connection that the kernel has not taken yet. The next waits for
    // this, not for the connection's other writes: a message queued behind the chunk completes
    // with no call back here, so waiting for it too would stop the rail for good.
    bool in_flight = false;
    bool pump_queued = false;  // a pump is due on the loop's next turn (Reactor::soon)
  };
  // A RAIL_CHUNK whose RAIL_DATA is next on its link.
  struct Incoming {
    std::shared_ptr<HeldRail> rail;
    std::uint64_t round = 0;
  };

  void queue(HeldRail& rail, std::uint64_t round);
  // Counts the rounds host code wrote itself since the loop last looked as started and sent here.
  void catch_up(HeldRail& rail);
  void release_ready(HeldRail& rail);
  void pump(Connection* link);
  void pump_soon(Connection* link, Outgoing& o);
  // A write of the link's rounds has gone to the kernel (or the connection gave up on it).
  void written(Connection* link, const std::vector<Outgoing::Item>& finished);
  void place(Connection& from, std::size_t bytes, const std::uint8_t* at);
  HeldRail* held_on(Connection& from, std::uint32_t id, std::string_view message, bool source);
  void bad(Connection& from, const std::string& what);
  void drop(std::uint32_t id);
  // Lends `link`'s socket to readers of rail `id`, if it can (the lane's request).
  void lend(std::uint32_t id);
  // Counts and reports the rounds readers took on `link` since the loop last looked.
  void readers_took(Connection& link);
  // The count and report of rounds up to `round` arrived at this destination (the loop's).
  void report_arrival(HeldRail& rail, std::uint64_t round);
  // A reader holding `lane` for `rail`: takes the rail's next chunks until round `round` has
  // arrived or a frame comes that is not one of them, then releases the lane.
  static void read_rounds(HeldRail& rail, ReadLane& lane, std::uint64_t round) noexcept;

  Reactor& reactor_;
  Events events_;
  std::map<std::uint32_t, std::shared_ptr<HeldRail>> held_;
  std::set<std::uint32_t> passed_on_;  // rails this source has ended (a few bytes each)
  std::map<Connection*, Outgoing> outgoing_;
  std::map<Connection*, Incoming> incoming_;
  std::set<Connection*> lane_links_;  // links whose read lane this watches
  bool raised_ = false;
  // Cleared when this goes, for the write callbacks that outlive it.
  std::shared_ptr<Rails*> self_ = std::make_shared<Rails*>(this);
};

}  // namespace rig::remote
