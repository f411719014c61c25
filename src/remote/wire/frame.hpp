// Frames: how messages are cut out of a connection's byte stream.
//
//   u32 length   (little-endian) the bytes that follow: 1 type byte + the body
//   u8  type     a message of messages.hpp
//   body         length - 1 bytes
//
// The decoder is pure (bytes in, frames out) and strict: a length of 0 or over frame_bytes_max, or
// a type no message has, makes the stream malformed at once, before the body arrives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "remote/limits.hpp"
#include "rig/result.hpp"

namespace rig::remote {

// One frame, borrowed from the decoder that produced it.
struct Frame {
  std::uint8_t type;
  std::span<const std::uint8_t> body;
};

// Writes the header of a frame of `type` with a body of `body_bytes` into `out`, so that a sender
// can gather the header and a payload it does not copy into one write. Raises std::invalid_argument
// if the frame would exceed frame_bytes_max: a sender splits bulk data before it frames it.
void write_frame_header(std::span<std::uint8_t, frame_header_bytes> out, std::uint8_t type,
                        std::size_t body_bytes);

// Cuts frames out of one connection's incoming bytes, fed in whatever pieces the socket delivers.
// After the first malformed header every call to next() returns the same error: the stream has no
// frame boundary left to trust.
//
// Owner: the connection that reads the bytes; one thread (the loop). A Frame from next() borrows
// the decoder's buffer and stays valid until the next prepare() or feed().
class FrameDecoder {
 public:
  // Space for `bytes` more bytes, for a read to fill in place; then commit() what it wrote, at most
  // `bytes` (std::invalid_argument past that).
  std::span<std::uint8_t> prepare(std::size_t bytes);
  void commit(std::size_t bytes);
  // prepare + copy + commit.
  void feed(std::span<const std::uint8_t> bytes);

  // The next whole frame, or nullopt until more bytes arrive, or an Error that starts
  // "malformed message: " and names the problem.
  Result<std::optional<Frame>> next();

  // A bulk frame (PAYLOAD, DATA) at the front whose header is in and whose body is not all: the
  // connection may read the rest of the body straight to where it goes. Only after next() has
  // returned nothing, so the header is checked already.
  struct PartialBulk {
    std::uint8_t type;
    std::size_t body_bytes;                  // the whole body's
    std::span<const std::uint8_t> buffered;  // the body's first bytes, here already
  };
  std::optional<PartialBulk> partial_bulk() const;
  // Forgets the partial bulk frame at the front, header and buffered bytes: the rest of its body
  // does not pass through the decoder.
  void skip_partial_bulk();

  // Bytes received and not yet returned in a frame.
  std::size_t buffered_bytes() const noexcept { return end_ - begin_; }

 private:
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0;     // first byte not yet returned
  std::size_t end_ = 0;       // one past the last byte received
  std::size_t prepared_ = 0;  // what the last prepare() offered and commit() may fill
  std::optional<Error> error_;
};

}  // namespace rig::remote
