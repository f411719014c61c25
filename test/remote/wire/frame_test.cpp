// Frames: the header, the streaming decoder fed in every way a socket may deliver bytes, and each
// refusal of a malformed stream with its exact text.
#include "remote/wire/frame.hpp"

#include <cstring>
#include <stdexcept>

#include "remote/support.hpp"
#include "remote/wire/codec.hpp"

using namespace rig::remote;
using rig::remote::test::cat;
using rig::remote::test::le32;

namespace {

std::vector<std::uint8_t> frame(std::uint8_t type, std::vector<std::uint8_t> body) {
  return cat(
      {le32(static_cast<std::uint32_t>(body.size() + 1)), std::vector<std::uint8_t>{type}, body});
}

std::vector<std::uint8_t> encode_all(std::vector<Message> messages) {
  std::vector<std::uint8_t> out;
  for (const auto& m : messages) encode(m, out);
  return out;
}

std::string error_of(std::vector<std::uint8_t> bytes) {
  FrameDecoder d;
  d.feed(bytes);
  auto r = d.next();
  REQUIRE_FALSE(r.ok());
  return r.error();
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a frame header is the length of the type and body, then the type") {
    std::array<std::uint8_t, frame_header_bytes> h{};
    write_frame_header(h, 0x02, 7);
    CHECK(h == std::array<std::uint8_t, 5>{8, 0, 0, 0, 0x02});
    write_frame_header(h, 0x01, frame_bytes_max - 1);
    CHECK(h == std::array<std::uint8_t, 5>{0, 0, 0x40, 0, 0x01});
    CHECK_THROWS_AS(write_frame_header(h, 0x01, frame_bytes_max), std::invalid_argument);
  }

  TEST_CASE("the decoder waits for whole frames and returns them in order") {
    FrameDecoder d;
    CHECK_FALSE(d.next()->has_value());
    const auto a = frame(Heartbeat::type, {});
    const auto b = frame(Close::type, {});
    const auto both = cat({a, b});
    d.feed(std::span(both).first(3));
    CHECK_FALSE(d.next()->has_value());
    d.feed(std::span(both).subspan(3, 3));
    auto first = d.next();
    REQUIRE(first->has_value());
    CHECK((*first)->type == Heartbeat::type);
    CHECK((*first)->body.empty());
    CHECK_FALSE(d.next()->has_value());
    CHECK(d.buffered_bytes() == 1);
    d.feed(std::span(both).subspan(6));
    auto second = d.next();
    REQUIRE(second->has_value());
    CHECK((*second)->type == Close::type);
    CHECK_FALSE(d.next()->has_value());
    CHECK(d.buffered_bytes() == 0);
  }

  TEST_CASE("the decoder refuses a bad header at once, with the reason, and for good") {
    CHECK(error_of(le32(0xffffffff)) ==
          "malformed message: frame length 4294967295 over the maximum 4194304");
    CHECK(error_of(le32(frame_bytes_max + 1)) ==
          "malformed message: frame length 4194305 over the maximum 4194304");
    CHECK(error_of(le32(0)) == "malformed message: frame length 0 leaves no room for a type byte");
    CHECK(error_of(cat({le32(1), std::vector<std::uint8_t>{0x7f}})) ==
          "malformed message: unknown type 0x7f");
    CHECK(error_of(cat({le32(100), std::vector<std::uint8_t>{0x00}})) ==
          "malformed message: unknown type 0x00");

    // Frames before the bad header still come out; everything after is refused.
    FrameDecoder d;
    d.feed(cat({frame(Heartbeat::type, {}), le32(0), frame(Heartbeat::type, {})}));
    CHECK(d.next()->has_value());
    CHECK(d.next().error() == "malformed message: frame length 0 leaves no room for a type byte");
    d.feed(frame(Heartbeat::type, {}));
    CHECK(d.next().error() == "malformed message: frame length 0 leaves no room for a type byte");
  }

  TEST_CASE("a frame of exactly the maximum length is a frame") {
    FrameDecoder d;
    std::vector<std::uint8_t> big =
        frame(Abort::type, std::vector<std::uint8_t>(frame_bytes_max - 1));
    d.feed(big);
    auto f = d.next();
    REQUIRE(f->has_value());
    CHECK((*f)->body.size() == frame_bytes_max - 1);
  }

  TEST_CASE("prepare and commit let a read fill the decoder in place") {
    FrameDecoder d;
    const auto bytes = encode_all({Abort{"first"}, Heartbeat{}});
    auto room = d.prepare(4);
    CHECK(room.size() == 4);
    std::memcpy(room.data(), bytes.data(), 4);
    d.commit(4);
    CHECK_FALSE(d.next()->has_value());
    room = d.prepare(bytes.size());
    std::memcpy(room.data(), bytes.data() + 4, bytes.size() - 4);
    d.commit(bytes.size() - 4);
    CHECK(decode(d.next()->value()).value() == Message(Abort{"first"}));
    CHECK(decode(d.next()->value()).value() == Message(Heartbeat{}));
    d.prepare(8);
    CHECK_THROWS_AS(d.commit(9), std::invalid_argument);
  }

  TEST_CASE("a bulk frame whose body is still coming can be taken off the decoder, and only it") {
    FrameDecoder d;
    std::vector<std::uint8_t> body(100);
    for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<std::uint8_t>(i);
    const auto payload = frame(Payload::type, body);
    d.feed(std::span(payload).first(frame_header_bytes - 1));  // not even the header yet
    CHECK_FALSE(d.next()->has_value());
    CHECK_FALSE(d.partial_bulk().has_value());
    d.feed(std::span(payload).subspan(frame_header_bytes - 1, 31));  // header and 30 body bytes
    CHECK_FALSE(d.next()->has_value());
    const auto partial = d.partial_bulk();
    REQUIRE(partial.has_value());
    CHECK(partial->type == Payload::type);
    CHECK(partial->body_bytes == 100);
    CHECK(std::vector<std::uint8_t>(partial->buffered.begin(), partial->buffered.end()) ==
          std::vector<std::uint8_t>(body.begin(), body.begin() + 30));
    // The rest of the body is read elsewhere; the decoder goes on with the frame after it.
    d.skip_partial_bulk();
    CHECK(d.buffered_bytes() == 0);
    d.feed(encode_all({Heartbeat{}}));
    CHECK(decode(d.next()->value()).value() == Message(Heartbeat{}));

    // A partial message that is not bulk, and a whole bulk frame, are not partial bulk frames.
    const auto abort = encode_all({Abort{"a reason long enough"}});
    d.feed(std::span(abort).first(abort.size() - 2));
    CHECK_FALSE(d.next()->has_value());
    CHECK_FALSE(d.partial_bulk().has_value());
    FrameDecoder whole;
    whole.feed(payload);
    CHECK_FALSE(whole.partial_bulk().has_value());
  }
}
