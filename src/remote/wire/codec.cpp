#include "remote/wire/codec.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "remote/wire/printable.hpp"
#include "remote/wire/wire.hpp"

// GCC 12 with -fsanitize=address reports a std::string inside std::variant's move constructor as
// maybe uninitialized when a decoded message moves into its Result: a known false positive of that
// compiler (the variant's index guards the member). Other compilers and flags are unaffected.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace rig::remote {

namespace {

// The fields() visitor that writes a message's body into `Out`.
template <typename Out>
class BodyWriter {
 public:
  BodyWriter(std::string_view message, Out& out) : message_(message), w_(out) {}
  void field(std::string_view, std::uint8_t v) { w_.u8(v); }
  void field(std::string_view, std::uint32_t v) { w_.u32(v); }
  void field(std::string_view, std::uint64_t v) { w_.u64(v); }
  template <typename A>
  void field(std::string_view name, const std::basic_string<char, std::char_traits<char>, A>& v,
             std::size_t max) {
    if (v.size() > max)
      throw std::invalid_argument("rig: " + std::string(message_) + " " + std::string(name) +
                                  " of " + std::to_string(v.size()) + " bytes over the maximum " +
                                  std::to_string(max));
    w_.string(v);
  }
  void text(std::string_view name, const std::string& v, std::size_t max) { field(name, v, max); }
  void field(std::string_view name, const std::vector<std::string>& v, std::size_t count_max,
             std::size_t bytes_max) {
    count(name, v.size(), count_max);
    for (const std::string& e : v) field(name, e, bytes_max);
  }
  // A list of records, each written through its own fields().
  template <typename T, typename A>
  void field(std::string_view name, const std::vector<T, A>& v, std::size_t count_max) {
    count(name, v.size(), count_max);
    for (const T& e : v) T::fields(e, *this);
  }

 private:
  // A list's count, refused over its maximum: our own message would break the peer's rule.
  void count(std::string_view name, std::size_t n, std::size_t count_max) {
    if (n > count_max)
      throw std::invalid_argument("rig: " + std::string(message_) + " " + std::string(name) +
                                  " of " + std::to_string(n) + " entries over the maximum " +
                                  std::to_string(count_max));
    w_.u32(static_cast<std::uint32_t>(n));
  }

  std::string_view message_;
  BasicWriter<Out> w_;
};

// The fields() visitor that adds up the bytes BodyWriter would write, so that a frame's buffer is
// sized once before it is written (growing it field by field took several allocations per
// SUBMIT, from the block pool, on the submit path). Limits are BodyWriter's to check.
class BodySize {
 public:
  void field(std::string_view, std::uint8_t) { bytes += 1; }
  void field(std::string_view, std::uint32_t) { bytes += 4; }
  void field(std::string_view, std::uint64_t) { bytes += 8; }
  template <typename A>
  void field(std::string_view, const std::basic_string<char, std::char_traits<char>, A>& v,
             std::size_t) {
    bytes += 4 + v.size();
  }
  void text(std::string_view name, const std::string& v, std::size_t max) { field(name, v, max); }
  void field(std::string_view, const std::vector<std::string>& v, std::size_t, std::size_t) {
    bytes += 4;
    for (const std::string& e : v) bytes += 4 + e.size();
  }
  template <typename T, typename A>
  void field(std::string_view, const std::vector<T, A>& v, std::size_t) {
    bytes += 4;
    for (const T& e : v) T::fields(e, *this);
  }

  std::size_t bytes = 0;
};

// The fields() visitor that reads a message's body.
class BodyReader {
 public:
  explicit BodyReader(Reader& r) : r_(r) {}
  void field(std::string_view name, std::uint8_t& v) { v = r_.u8(name); }
  void field(std::string_view name, std::uint32_t& v) { v = r_.u32(name); }
  void field(std::string_view name, std::uint64_t& v) { v = r_.u64(name); }
  template <typename A>
  void field(std::string_view name, std::basic_string<char, std::char_traits<char>, A>& v,
             std::size_t max) {
    const std::string s = r_.string(name, max);
    v.assign(s.data(), s.size());
  }
  // Text for people, which a peer sends printable: escaped here, once, if it is not (a hostile
  // peer's newline or escape code never reaches a log line or a terminal).
  void text(std::string_view name, std::string& v, std::size_t max) {
    v = printable_once(r_.string(name, max));
  }
  void field(std::string_view name, std::vector<std::string>& v, std::size_t count_max,
             std::size_t bytes_max) {
    const auto n = count(name, count_max);
    v.clear();
    for (std::uint32_t i = 0; i < n && r_.ok(); ++i) v.push_back(r_.string(name, bytes_max));
  }
  template <typename T, typename A>
  void field(std::string_view name, std::vector<T, A>& v, std::size_t count_max) {
    const auto n = count(name, count_max);
    v.clear();
    v.reserve(n);
    for (std::uint32_t i = 0; i < n && r_.ok(); ++i) T::fields(v.emplace_back(), *this);
  }

 private:
  // A list's count, 0 once the body is malformed: over its maximum, or beyond the bytes left
  // (every entry takes at least one), which is caught before anything is allocated for it.
  std::uint32_t count(std::string_view name, std::size_t count_max) {
    const std::uint32_t n = r_.u32(name);
    if (!r_.ok()) return 0;
    if (n > count_max) {
      r_.fail(std::string(name) + " count " + std::to_string(n) + " over the maximum " +
              std::to_string(count_max));
      return 0;
    }
    if (n > r_.remaining()) {
      r_.fail(std::string(name) + " count " + std::to_string(n) + " past the end of the body");
      return 0;
    }
    return n;
  }

  Reader& r_;
};

template <typename M>
Result<Message> decode_as(std::span<const std::uint8_t> body) {
  M message{};
  Reader r(M::name, body);
  BodyReader visitor(r);
  M::fields(message, visitor);
  if (!r.finish()) return Error("malformed message: " + r.error());
  return Message(std::move(message));
}

// Decoders indexed like Message's alternatives, looked up by type byte.
template <typename V>
struct Decoders;

template <typename... Ms>
struct Decoders<std::variant<Ms...>> {
  static Result<Message> decode(std::uint8_t type, std::span<const std::uint8_t> body) {
    using Fn = Result<Message> (*)(std::span<const std::uint8_t>);
    static constexpr std::uint8_t types[] = {Ms::type...};
    static constexpr Fn fns[] = {&decode_as<Ms>...};
    for (std::size_t i = 0; i < sizeof...(Ms); ++i)
      if (types[i] == type) return fns[i](body);
    return Error("malformed message: unknown type " + hex_byte(type));
  }
};

}  // namespace

namespace {

// The bytes of `m`'s frame: its header and its body.
template <typename M>
std::size_t frame_bytes_of(const M& m) {
  BodySize size;
  M::fields(m, size);
  return frame_header_bytes + size.bytes;
}

// Appends `m`'s frame to `out`; on a throw, leaves `out` as it was, so a caller that survives the
// throw has no half frame queued.
template <typename M, typename Out>
void encode_one(const M& m, Out& out) {
  const std::size_t start = out.size();
  try {
    // One allocation at most; still geometric when frames are appended one after another.
    const std::size_t need = start + frame_bytes_of(m);
    if (need > out.capacity()) out.reserve(std::max(need, 2 * out.capacity()));
    out.resize(start + frame_header_bytes);
    BodyWriter<Out> visitor(M::name, out);
    M::fields(m, visitor);
    const std::size_t body = out.size() - start - frame_header_bytes;
    write_frame_header(
        std::span<std::uint8_t, frame_header_bytes>(out.data() + start, frame_header_bytes),
        M::type, body);
  } catch (...) {
    out.resize(start);
    throw;
  }
}

}  // namespace

void encode(const Message& message, std::vector<std::uint8_t>& out) {
  std::visit([&out](const auto& m) { encode_one(m, out); }, message);
}

void encode(const Message& message, Bytes& out) {
  std::visit([&out](const auto& m) { encode_one(m, out); }, message);
}

void encode(const Submit& message, Bytes& out) {
  encode_one(message, out);
}

std::size_t frame_bytes(const Submit& message) {
  return frame_bytes_of(message);
}

namespace {

// Bytes written into a fixed span, as BodyWriter writes into a vector; what would pass its end is
// not written, and `over` says so.
class SpanOut {
 public:
  explicit SpanOut(std::span<std::uint8_t> to) noexcept : to_(to) {}
  std::size_t size() const noexcept { return used_; }
  std::uint8_t* data() noexcept { return to_.data(); }
  void resize(std::size_t n) noexcept {
    if (n > to_.size()) {
      over = true;
      return;
    }
    used_ = n;
  }
  void push_back(std::uint8_t v) noexcept {
    if (used_ == to_.size()) {
      over = true;
      return;
    }
    to_[used_++] = v;
  }
  std::uint8_t* end() noexcept { return to_.data() + used_; }
  template <typename It>
  void insert(std::uint8_t*, It first, It last) noexcept {
    for (; first != last; ++first) push_back(static_cast<std::uint8_t>(*first));
  }
  bool over = false;

 private:
  std::span<std::uint8_t> to_;
  std::size_t used_ = 0;
};

}  // namespace

std::size_t encode_into(const RailChunk& message, std::span<std::uint8_t> out) noexcept {
  if (out.size() < rail_chunk_frame_bytes) return 0;
  SpanOut to(out);
  to.resize(frame_header_bytes);
  BodyWriter<SpanOut> visitor(RailChunk::name, to);
  RailChunk::fields(message, visitor);  // fixed-width fields only: nothing to throw
  if (to.over) return 0;
  write_frame_header(std::span<std::uint8_t, frame_header_bytes>(out.data(), frame_header_bytes),
                     RailChunk::type, to.size() - frame_header_bytes);
  return to.size();
}

Result<Message> decode(const Frame& frame) {
  return Decoders<Message>::decode(frame.type, frame.body);
}

std::string clamp_reason(std::string_view why) {
  if (why.size() <= reason_bytes_max) return std::string(why);
  std::size_t cut = reason_bytes_max;
  // Back up over UTF-8 continuation bytes (0x80 to 0xBF) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(why[cut]) & 0xC0) == 0x80) --cut;
  return std::string(why.substr(0, cut));
}

}  // namespace rig::remote
