// rigd's log: the one path by which every line its processes write reaches stderr. A line is
// escaped there unless it is printable already (rig::remote::printable_once: the library escapes
// peer text where it enters its own, and a line that still holds a newline, which would forge a
// whole line, or a terminal's escape code is escaped whole), carries its process's prefix, and is
// written whole or not at all, without ever blocking: a stderr that nobody reads (a full pipe, a
// stopped terminal, a socket whose reader stalls) costs the lines that do not fit, which are
// counted, never the daemon's loop, a job's loop or the watchdog. The next line that gets through
// says how many were lost, and the daemon says how many in all at its exit.
//
// How each kind of stderr is written without blocking:
//   - a pipe or FIFO: through an open file description of our own (/proc/self/fd/N reopened with
//     O_NONBLOCK: the inherited one is shared with other processes, whose writes must keep
//     blocking), each line at most PIPE_BUF bytes so that a write is whole or fails with EAGAIN;
//     ordinary lines leave a reserve of the pipe free for the lines at exit;
//   - a terminal or other character device: the same reopening; a write the terminal takes only
//     in part keeps its rest, which goes out before any later line;
//   - a socket: send() with MSG_DONTWAIT, the rest of a part-taken line kept as for a terminal;
//   - a regular file or block device: written as it is (its writes do not wait for a reader).
#pragma once

#include <limits.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace rig::rigd {

// The longest write of one line, its prefix and newline included: a pipe takes a write of at most
// PIPE_BUF bytes whole or not at all, never interleaved with another writer's. A longer line is
// cut.
inline constexpr std::size_t log_line_bytes_max = PIPE_BUF;
// What ordinary lines leave free in a pipe (at most half of it), for the lines written at exit,
// so that "N log lines were not written to stderr" reaches a reader who comes only after the end.
inline constexpr std::size_t log_reserve_bytes = 4 * PIPE_BUF;
// The longest a line waits for another thread's line to finish: a bound, should a write to a
// regular file on a stalled network disk ever hold it.
inline constexpr int log_lock_wait_ms = 1000;

// Counts of the lines not written. They may live in memory the daemon shares with its job
// processes (one memfd each maps), so that the count said at exit covers them all: lock-free
// atomics are address-free, so they count right across processes. Any thread of any process.
struct LogLosses {
  std::atomic<std::uint64_t> unreported{0};  // lost since the last line that said so
  std::atomic<std::uint64_t> total{0};       // lost since the counts were made
};

// Ordinary lines leave a pipe's reserve free; the last lines of a process may use it.
enum class Urgency { ordinary, last };

// One stream of log lines. Owner: the process (rigd makes one, for stderr); tests make their own.
// Thread: any; lines from several threads are serialised. Lifetime: the process's, or the test's
// scope; the descriptor it was given stays open and is not closed by it.
class LogSink {
 public:
  // A sink on what `fd` refers to; `prefix` (ours, not escaped) starts every line.
  LogSink(int fd, std::string prefix);
  ~LogSink();
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  void set_prefix(std::string prefix);
  // Counts in shared memory from now on, instead of the sink's own (which must be zero then, or
  // are added in). `losses` outlives the sink.
  void share_losses(LogLosses* losses);

  // Writes the prefix, `text` escaped, and a newline, as one write; first, if lines were lost
  // since the last that said so, a line saying how many. Whether `text` was written.
  bool line(std::string_view text, Urgency urgency = Urgency::ordinary);
  // "N log lines were not written to stderr" (last urgency), N the total, if it is not 0.
  void say_losses();
  std::uint64_t lost() const;

  // Makes fd 2 this sink's own description where it has one, so that what any library writes to
  // stderr cannot block either; the description it replaces is left as it is.
  void route_stderr();

 private:
  enum class Kind { file, pipe, stream, socket, none };
  // Writes `bytes` once: how many went, 0 when none could go now, -1 on an error.
  ssize_t put(std::string_view bytes);
  // Whether a pipe has room for `bytes` more with the reserve left free (true when unknown).
  bool room_for(std::size_t bytes, Urgency urgency) const;
  // Writes one whole line or nothing; a part taken leaves its rest in pending_.
  bool write_line(const std::string& line);
  void count_lost(std::uint64_t n);

  std::mutex mu_;
  Kind kind_ = Kind::none;
  int fd_ = -1;          // what the sink writes on
  bool own_fd_ = false;  // whether fd_ is a description of the sink's own (closed with it)
  std::string prefix_;
  std::string pending_;  // the rest of a line a terminal or socket took only in part
  LogLosses own_losses_;
  LogLosses* losses_ = &own_losses_;
};

}  // namespace rig::rigd
