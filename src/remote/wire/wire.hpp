// Little-endian field readers and writers shared by the frame codec and the handshake, so that
// every bound on a peer's bytes is checked by one piece of code.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pool.hpp"

namespace rig::remote {

// Reads the fields of one message body in order, checking each against the bytes left. The first
// failure sticks: later reads return zeros and empty values, and error() keeps the first reason, so
// a decoder reads all its fields and checks once at the end (finish). Values read after a failure
// are never meaningful; a decoder that needs one early (a length it allocates by) checks ok()
// first.
//
// Owner: the decoding function that made it, on its stack; it borrows `body`, which must outlive
// it. One thread.
class Reader {
 public:
  // `what` names the message in errors ("ABORT", "proof").
  Reader(std::string_view what, std::span<const std::uint8_t> body) noexcept
      : what_(what), body_(body) {}

  std::uint8_t u8(std::string_view field);
  std::uint32_t u32(std::string_view field);
  std::uint64_t u64(std::string_view field);
  // `n` bytes as they are; empty after a failure.
  std::span<const std::uint8_t> bytes(std::string_view field, std::size_t n);
  template <std::size_t N>
  std::array<std::uint8_t, N> array(std::string_view field) {
    std::array<std::uint8_t, N> out{};
    auto got = bytes(field, N);
    if (got.size() == N) std::copy(got.begin(), got.end(), out.begin());
    return out;
  }
  // A u32 length, then that many bytes; refused over `max`.
  std::string string(std::string_view field, std::size_t max);

  // Records a decoder's own check on a value it read (a role out of range): "WHAT: WHY". Keeps an
  // earlier failure.
  void fail(std::string_view why);
  // Refuses bytes after the last field, then reports: true when every read succeeded.
  bool finish();

  bool ok() const noexcept { return error_.empty(); }
  const std::string& error() const noexcept { return error_; }
  std::size_t offset() const noexcept { return at_; }
  std::size_t remaining() const noexcept { return body_.size() - at_; }

 private:
  // The next `n` bytes, or empty with a failure recorded.
  std::span<const std::uint8_t> take(std::string_view field, std::size_t n);

  std::string_view what_;
  std::span<const std::uint8_t> body_;
  std::size_t at_ = 0;
  std::string error_;
};

// Appends little-endian fields to a byte vector (`Out`: std::vector<std::uint8_t> or Bytes).
// Owner: the encoder; one thread.
template <typename Out>
class BasicWriter {
 public:
  explicit BasicWriter(Out& out) noexcept : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u32(std::uint32_t v) {
    const std::uint8_t b[4] = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                               static_cast<std::uint8_t>(v >> 16),
                               static_cast<std::uint8_t>(v >> 24)};
    out_.insert(out_.end(), b, b + 4);
  }
  void u64(std::uint64_t v) {
    u32(static_cast<std::uint32_t>(v));
    u32(static_cast<std::uint32_t>(v >> 32));
  }
  void bytes(std::span<const std::uint8_t> v) { out_.insert(out_.end(), v.begin(), v.end()); }
  // A u32 length, then the bytes. The caller has checked the length against its field's limit.
  void string(std::string_view v) {
    u32(static_cast<std::uint32_t>(v.size()));
    out_.insert(out_.end(), v.begin(), v.end());
  }

 private:
  Out& out_;
};
using Writer = BasicWriter<std::vector<std::uint8_t>>;

// Bytes a connection writes, built where malloc is not safe (a submission in a signal handler):
// their memory comes from the block pool (core/pool.hpp).
using Bytes = rig::detail::PoolVector<std::uint8_t>;

// Little-endian loads and stores on raw bytes, for fixed headers.
inline std::uint32_t load_u32(const std::uint8_t* p) noexcept {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
inline void store_u32(std::uint8_t* p, std::uint32_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}

// "0x7f": how a type or code byte appears in errors.
std::string hex_byte(std::uint8_t v);

}  // namespace rig::remote
