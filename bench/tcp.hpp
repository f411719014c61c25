// The raw TCP baselines: an echo peer (its own process, placed where the agent is) and the client
// side of each measurement. Plain sockets, TCP_NODELAY on both ends as rig's connections have it,
// no framing beyond what each mode needs: the floor that rig's figures are compared with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rig::bench {

// What a connection to the echo peer does, named by its first byte.
enum class EchoMode : char {
  blocking = 'b',  // blocking reads and writes: echo each message of the agreed size
  spinning = 's',  // the same with both ends busy-polling non-blocking sockets
  stream = 't',    // per transfer: a u64 size, that many bytes, then one byte back
  // The same, each transfer's bytes read across memory of its size, as a copy's destination
  // receives them, where `stream` reads every piece into one buffer of stream_chunk_bytes.
  stream_placed = 'p',
};

// Streams are read in pieces of this size, the write size the design recommends for bulk data
// (64 KiB writes halve throughput on loopback; single huge writes lose a fifth).
inline constexpr std::size_t stream_chunk_bytes = 1 << 20;

// Runs the echo peer: listens at host:port (0: any), prints "listening HOST:PORT" on stdout, then
// serves connections one after another until killed. Returns an exit status.
int run_echo_peer(const std::string& host, int port);

// A client connection to the echo peer. Owner: the measuring thread; closes on destruction.
class EchoClient {
 public:
  // Connects and announces `mode` and `message_bytes`; throws std::runtime_error on failure.
  EchoClient(const std::string& host, int port, EchoMode mode, std::uint32_t message_bytes);
  ~EchoClient();
  EchoClient(const EchoClient&) = delete;
  EchoClient& operator=(const EchoClient&) = delete;

  // One message out and its echo back (blocking or spinning, per the mode).
  void round_trip();
  // Pipelined use: fill puts `window` messages in flight; each step takes back whatever echoes
  // have arrived and sends as many more in one write, so the window stays full, and returns how
  // many it took back; drain takes the rest back.
  void pipeline_fill(std::size_t window);
  std::size_t pipeline_step();
  void pipeline_drain();
  // One transfer of `bytes` from `data`, in stream_chunk_bytes writes, until the peer's ack.
  void transfer(const std::uint8_t* data, std::uint64_t bytes);

 private:
  void send_all(const void* p, std::size_t n);
  void recv_all(void* p, std::size_t n);
  int fd_ = -1;
  EchoMode mode_;
  std::size_t in_flight_ = 0;
  std::size_t partial_ = 0;  // bytes of an echo not yet whole
  std::vector<std::uint8_t> out_, in_;
  std::vector<std::uint8_t> window_out_, window_in_;
};

}  // namespace rig::bench
