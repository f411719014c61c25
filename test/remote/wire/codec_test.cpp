// The codec: each message's exact bytes, round trips through the decoder fed whole, byte by byte
// and in random pieces, and every refusal with the field it names.
#include "remote/wire/codec.hpp"

#include <cstring>
#include <random>
#include <stdexcept>

#include "remote/support.hpp"

using namespace rig::remote;
using rig::remote::test::cat;
using rig::remote::test::le32;

namespace {

std::vector<std::uint8_t> encoded(const Message& m) {
  std::vector<std::uint8_t> out;
  encode(m, out);
  return out;
}

// The decoded message of one whole frame, or its error.
rig::Result<Message> round(std::vector<std::uint8_t> bytes) {
  FrameDecoder d;
  d.feed(bytes);
  auto f = d.next();
  if (!f.ok()) return rig::Error(f.error());
  REQUIRE(f->has_value());
  return decode(**f);
}

std::vector<std::uint8_t> frame(std::uint8_t type, std::vector<std::uint8_t> body) {
  return cat(
      {le32(static_cast<std::uint32_t>(body.size() + 1)), std::vector<std::uint8_t>{type}, body});
}

Message random_message(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return Heartbeat{};
    case 1:
      return Close{};
    case 2:
      return Closed{};
    default: {
      // Mostly short causes, sometimes one near the limit, so frames span many pieces; printable,
      // as every sender's causes are (the decoder would escape any other byte).
      const std::size_t n = rng() % 8 == 0 ? rng() % (reason_bytes_max + 1) : rng() % 64;
      std::string why(n, '\0');
      for (auto& c : why) c = static_cast<char>(' ' + rng() % 95);
      return Abort{why};
    }
  }
}

// Decodes every frame the decoder holds now.
void drain(FrameDecoder& d, std::vector<Message>& got) {
  for (;;) {
    auto f = d.next();
    REQUIRE(f.ok());
    if (!f->has_value()) return;
    auto m = decode(**f);
    REQUIRE(m.ok());
    got.push_back(std::move(*m));
  }
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("each control message's bytes") {
    CHECK(encoded(Heartbeat{}) == std::vector<std::uint8_t>{1, 0, 0, 0, 0x01});
    CHECK(encoded(Close{}) == std::vector<std::uint8_t>{1, 0, 0, 0, 0x03});
    CHECK(encoded(Closed{}) == std::vector<std::uint8_t>{1, 0, 0, 0, 0x04});
    CHECK(encoded(Abort{"why"}) ==
          std::vector<std::uint8_t>{8, 0, 0, 0, 0x02, 3, 0, 0, 0, 'w', 'h', 'y'});
    CHECK(message_name(0x01) == "HEARTBEAT");
    CHECK(message_name(0x02) == "ABORT");
    CHECK(message_name(0x03) == "CLOSE");
    CHECK(message_name(0x04) == "CLOSED");
    CHECK(message_name(0x00).empty());
    CHECK(message_name(0x7f).empty());
  }

  TEST_CASE("each message round-trips, an abort's printable reason byte for byte") {
    const std::string every_printable = [] {
      std::string s;
      for (int i = 0x20; i < 0x7f; ++i) s.push_back(static_cast<char>(i));
      return s;
    }();
    for (const Message& m :
         {Message(Heartbeat{}), Message(Close{}), Message(Closed{}), Message(Abort{""}),
          Message(Abort{every_printable}), Message(Abort{std::string(reason_bytes_max, 'x')})}) {
      auto back = round(encoded(m));
      REQUIRE(back.ok());
      CHECK(*back == m);
    }
  }

  TEST_CASE("a text field that is not printable is escaped as it is decoded, once") {
    // A hostile agent's abort that would forge a log line and clear the operator's screen.
    const std::string forged = "x\nrigd[1]: job 999: closed\x1b[2J";
    auto abort = round(encoded(Abort{forged}));
    REQUIRE(abort.ok());
    CHECK(std::get<Abort>(*abort).reason == "x\\nrigd[1]: job 999: closed\\x1b[2J");
    // An honest process's cause carries its peers' bytes escaped already: kept as it is.
    auto honest = round(encoded(Abort{"controller aborted: x\\nrigd"}));
    REQUIRE(honest.ok());
    CHECK(std::get<Abort>(*honest).reason == "controller aborted: x\\nrigd");
    // Every other text for people: an answer's why, a device's name and arch, a host's arch.
    Opened opened{"no\rway", {{1, "SIM:0\x1b]0;owned\x07", "sim\n", 1}}, {}};
    auto o = round(encoded(opened));
    REQUIRE(o.ok());
    const auto& got = std::get<Opened>(*o);
    CHECK(got.why == "no\\rway");
    CHECK(got.devices.at(0).name == "SIM:0\\x1b]0;owned\\x07");
    CHECK(got.devices.at(0).arch == "sim\\n");
    CHECK(std::get<Made>(*round(encoded(Made{0, "out\tof"}))).why == "out\\tof");
    CHECK(std::get<Loaded>(*round(encoded(Loaded{0, "\xff"}))).why == "\\xff");
    CHECK(std::get<Ready>(*round(encoded(Ready{"x86\n", 1}))).host_arch == "x86\\n");
    // Names matched against each other are kept as sent: JOIN's (the agent escapes them where it
    // logs them).
    Join join{"a\nb", {"a\nb"}, {"h\n:1"}};
    CHECK(std::get<Join>(*round(encoded(join))) == join);
  }

  TEST_CASE("the decoder refuses each malformed body, naming the message and the field") {
    CHECK(round(frame(Abort::type, cat({le32(90), std::vector<std::uint8_t>(8, 'a')}))).error() ==
          "malformed message: ABORT: reason length 90 past the end of a 12-byte body");
    CHECK(round(frame(Abort::type, {1, 0})).error() ==
          "malformed message: ABORT: reason length (4 bytes at offset 0) past the end of a 2-byte "
          "body");
    CHECK(round(frame(Abort::type, {})).error() ==
          "malformed message: ABORT: reason length (4 bytes at offset 0) past the end of a 0-byte "
          "body");
    CHECK(round(frame(Abort::type, le32(reason_bytes_max + 1))).error() ==
          "malformed message: ABORT: reason length 16385 over the maximum 16384");
    CHECK(round(frame(Abort::type, cat({le32(1), std::vector<std::uint8_t>{'a', 'b'}}))).error() ==
          "malformed message: ABORT: 1 trailing byte");
    CHECK(round(frame(Heartbeat::type, {0, 0, 0})).error() ==
          "malformed message: HEARTBEAT: 3 trailing bytes");
    CHECK(round(frame(Close::type, {1})).error() == "malformed message: CLOSE: 1 trailing byte");
    CHECK(round(frame(Closed::type, {1, 2})).error() ==
          "malformed message: CLOSED: 2 trailing bytes");
    CHECK(decode(Frame{0x7f, {}}).error() == "malformed message: unknown type 0x7f");
    // A list's count is checked against its maximum and against the bytes left, for a list of
    // strings as for a list of records, before anything is read or allocated for it.
    const std::vector<std::uint8_t> you = cat({le32(1), std::vector<std::uint8_t>{'a'}});
    CHECK(round(frame(Join::type, cat({you, le32(agents_max + 1)}))).error() ==
          "malformed message: JOIN: names count 1025 over the maximum 1024");
    CHECK(round(frame(Join::type, cat({you, le32(1000), le32(0)}))).error() ==
          "malformed message: JOIN: names count 1000 past the end of the body");
  }

  TEST_CASE("the encoder refuses a field over its limit and leaves the output as it was") {
    std::vector<std::uint8_t> out = encoded(Heartbeat{});
    CHECK_THROWS_WITH_AS(encode(Abort{std::string(reason_bytes_max + 1, 'x')}, out),
                         "rig: ABORT reason of 16385 bytes over the maximum 16384",
                         std::invalid_argument);
    CHECK(out == encoded(Heartbeat{}));
  }

  TEST_CASE("clamp_reason fits any cause into an abort without splitting a character") {
    CHECK(clamp_reason("short") == "short");
    CHECK(clamp_reason(std::string(reason_bytes_max + 10, 'x')) ==
          std::string(reason_bytes_max, 'x'));
    // A 3-byte character (U+20AC) across the limit is left out whole.
    const std::string euro = "\xe2\x82\xac";
    const std::string cause = std::string(reason_bytes_max - 1, 'x') + euro + "tail";
    CHECK(clamp_reason(cause) == std::string(reason_bytes_max - 1, 'x'));
    const std::string fits = std::string(reason_bytes_max - 3, 'x') + euro + "tail";
    CHECK(clamp_reason(fits) == std::string(reason_bytes_max - 3, 'x') + euro);
    CHECK_NOTHROW(encoded(Abort{clamp_reason(cause)}));
  }

  TEST_CASE("a stream of messages decodes the same fed whole, byte by byte, and in random pieces") {
    std::mt19937_64 rng(rig::remote::test::test_seed());
    std::vector<Message> sent;
    std::vector<std::uint8_t> stream;
    for (int i = 0; i < 300; ++i) {
      sent.push_back(random_message(rng));
      encode(sent.back(), stream);
    }

    SUBCASE("whole") {
      FrameDecoder d;
      std::vector<Message> got;
      d.feed(stream);
      drain(d, got);
      CHECK(got == sent);
    }
    SUBCASE("byte by byte") {
      FrameDecoder d;
      std::vector<Message> got;
      for (std::uint8_t b : stream) {
        d.feed(std::span(&b, 1));
        drain(d, got);
      }
      CHECK(got == sent);
      CHECK(d.buffered_bytes() == 0);
    }
    SUBCASE("random pieces, through feed and through prepare/commit") {
      for (int round = 0; round < 20; ++round) {
        FrameDecoder d;
        std::vector<Message> got;
        std::size_t at = 0;
        while (at < stream.size()) {
          // Piece sizes from 1 byte to 64 KiB, as reads of a socket come.
          const std::size_t n =
              std::min<std::size_t>(1 + rng() % (1 << (rng() % 17)), stream.size() - at);
          if (rng() % 2) {
            d.feed(std::span(stream).subspan(at, n));
          } else {
            auto room = d.prepare(n + rng() % 100);
            std::memcpy(room.data(), stream.data() + at, n);
            d.commit(n);
          }
          at += n;
          drain(d, got);
        }
        CHECK(got == sent);
      }
    }
  }

  TEST_CASE("a malformed frame in a stream fails it wherever the pieces are cut") {
    std::mt19937_64 rng(rig::remote::test::test_seed());
    std::vector<std::uint8_t> stream;
    encode(Abort{"first"}, stream);
    encode(Heartbeat{}, stream);
    const auto bad = frame(0x7f, {1, 2, 3});
    stream.insert(stream.end(), bad.begin(), bad.end());
    encode(Close{}, stream);
    for (int round = 0; round < 200; ++round) {
      FrameDecoder d;
      std::size_t frames = 0;
      std::string error;
      std::size_t at = 0;
      while (at < stream.size() && error.empty()) {
        const std::size_t n = std::min<std::size_t>(1 + rng() % 8, stream.size() - at);
        d.feed(std::span(stream).subspan(at, n));
        at += n;
        for (;;) {
          auto f = d.next();
          if (!f.ok()) {
            error = f.error();
            break;
          }
          if (!f->has_value()) break;
          ++frames;
        }
      }
      CHECK(frames == 2);
      CHECK(error == "malformed message: unknown type 0x7f");
    }
  }
}

namespace {

std::vector<std::uint8_t> le64(std::uint64_t v) {
  return cat({le32(static_cast<std::uint32_t>(v)), le32(static_cast<std::uint32_t>(v >> 32))});
}

// A RAIL's body up to its parts list: rail 7, role `role`, peer `peer`, then `count` as the list's
// count and nothing after it.
std::vector<std::uint8_t> rail_head(std::uint8_t role, std::string_view peer, std::uint32_t count) {
  return cat({le32(7), std::vector<std::uint8_t>{role},
              le32(static_cast<std::uint32_t>(peer.size())), rig::remote::test::bytes_of(peer),
              le32(count)});
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("each rail message's bytes and name") {
    CHECK(encoded(RailMake{7, RailMake::destination, "b", {{3, 16, 4096}}}) ==
          cat({le32(39), std::vector<std::uint8_t>{0x40}, le32(7), std::vector<std::uint8_t>{1},
               le32(1), std::vector<std::uint8_t>{'b'}, le32(1), le64(3), le64(16), le64(4096)}));
    CHECK(encoded(RailMade{"no"}) == cat({le32(7), std::vector<std::uint8_t>{0x41}, le32(2),
                                          std::vector<std::uint8_t>{'n', 'o'}}));
    CHECK(encoded(RailGo{1, 2, 1}) == cat({le32(14), std::vector<std::uint8_t>{0x42}, le32(1),
                                           le64(2), std::vector<std::uint8_t>{1}}));
    CHECK(encoded(RailExpect{1, 2}) ==
          cat({le32(13), std::vector<std::uint8_t>{0x43}, le32(1), le64(2)}));
    CHECK(encoded(RailReady{1, 2}) ==
          cat({le32(13), std::vector<std::uint8_t>{0x44}, le32(1), le64(2)}));
    CHECK(encoded(RailChunk{1, 2, 3, 4, 1}) ==
          cat({le32(26), std::vector<std::uint8_t>{0x45}, le32(1), le64(2), le32(3), le64(4),
               std::vector<std::uint8_t>{1}}));
    // The same frame written into fixed memory (host code's rounds), or none where it cannot fit.
    std::array<std::uint8_t, rail_chunk_frame_bytes + 1> fixed{};
    CHECK(encode_into(RailChunk{1, 2, 3, 4}, fixed) == rail_chunk_frame_bytes);
    CHECK(std::vector<std::uint8_t>(fixed.begin(), fixed.begin() + rail_chunk_frame_bytes) ==
          encoded(RailChunk{1, 2, 3, 4}));
    CHECK(encode_into(RailChunk{1, 2, 3, 4}, std::span(fixed).first(rail_chunk_frame_bytes - 1)) ==
          0);
    CHECK(encoded(RailData{}) == std::vector<std::uint8_t>{1, 0, 0, 0, 0x46});
    CHECK(encoded(RailCount{5, RailCount::arrived, 9}) ==
          cat({le32(14), std::vector<std::uint8_t>{0x47}, le32(5), std::vector<std::uint8_t>{1},
               le64(9)}));
    CHECK(encoded(RailEnd{5}) == cat({le32(5), std::vector<std::uint8_t>{0x48}, le32(5)}));
    CHECK(encoded(RailAwait{1, 2}) ==
          cat({le32(13), std::vector<std::uint8_t>{0x49}, le32(1), le64(2)}));
    const std::vector<std::pair<std::uint8_t, std::string_view>> names = {
        {0x40, "RAIL"},       {0x41, "RAILED"},     {0x42, "RAIL_GO"},   {0x43, "RAIL_EXPECT"},
        {0x44, "RAIL_READY"}, {0x45, "RAIL_CHUNK"}, {0x46, "RAIL_DATA"}, {0x47, "RAIL_COUNT"},
        {0x48, "RAIL_END"},   {0x49, "RAIL_AWAIT"}};
    for (const auto& [type, name] : names) CHECK(message_name(type) == name);
    CHECK(message_name(0x4A).empty());
    // RAIL_DATA's bytes pass through connections undecoded, like PAYLOAD's and DATA's; no other
    // rail message does.
    CHECK(is_bulk(RailData::type));
    for (std::uint8_t t = 0x40; t <= 0x49; ++t) CHECK(is_bulk(t) == (t == RailData::type));
  }

  TEST_CASE("each rail message round-trips, at its limits") {
    std::vector<WireRailPart> most(rail_transfers_max);
    for (std::size_t i = 0; i < most.size(); ++i) most[i] = {i, i * 3, UINT64_MAX - i};
    const std::vector<Message> messages = {
        RailMake{1, RailMake::source, "", {{0, 0, 1}}},
        RailMake{UINT32_MAX, RailMake::destination, std::string(name_bytes_max, 'n'), most},
        // Names are matched, not printed, here: kept as sent (the agent escapes them where it
        // prints them).
        RailMake{2, RailMake::source, "a\nb", {{1, 2, 3}, {4, 5, 6}}},
        RailMade{""},
        RailMade{std::string(reason_bytes_max, 'w')},
        RailGo{UINT32_MAX, UINT64_MAX, UINT8_MAX},
        RailExpect{3, 1},
        RailReady{3, UINT64_MAX},
        RailChunk{UINT32_MAX, UINT64_MAX, UINT32_MAX, UINT64_MAX, UINT8_MAX},
        RailData{},
        RailCount{4, RailCount::sent, 0},
        RailCount{4, RailCount::arrived, UINT64_MAX},
        RailEnd{UINT32_MAX},
        RailAwait{UINT32_MAX, UINT64_MAX},
    };
    for (const Message& m : messages) {
      auto back = round(encoded(m));
      REQUIRE(back.ok());
      CHECK(*back == m);
    }
    // RAILED's why is text for people: escaped as it is decoded.
    CHECK(std::get<RailMade>(*round(encoded(RailMade{"no\nroom\x1b[2J"}))).why ==
          "no\\nroom\\x1b[2J");
  }

  TEST_CASE("the decoder refuses each malformed rail message, naming the field") {
    // A RAIL cut short at each of its fields.
    CHECK(round(frame(RailMake::type, {})).error() ==
          "malformed message: RAIL: rail (4 bytes at offset 0) past the end of a 0-byte body");
    CHECK(round(frame(RailMake::type, le32(7))).error() ==
          "malformed message: RAIL: role (1 byte at offset 4) past the end of a 4-byte body");
    CHECK(round(frame(RailMake::type, cat({le32(7), std::vector<std::uint8_t>{0}}))).error() ==
          "malformed message: RAIL: peer length (4 bytes at offset 5) past the end of a 5-byte "
          "body");
    CHECK(round(frame(RailMake::type, cat({le32(7), std::vector<std::uint8_t>{0}, le32(5),
                                           std::vector<std::uint8_t>{'a'}})))
              .error() == "malformed message: RAIL: peer length 5 past the end of a 10-byte body");
    CHECK(round(frame(RailMake::type, cat({le32(7), std::vector<std::uint8_t>{0}, le32(0)})))
              .error() ==
          "malformed message: RAIL: parts (4 bytes at offset 9) past the end of a 9-byte body");
    CHECK(round(frame(RailMake::type, cat({rail_head(0, "", 1), le64(3)}))).error() ==
          "malformed message: RAIL: offset (8 bytes at offset 21) past the end of a 21-byte body");
    CHECK(round(frame(RailMake::type, cat({rail_head(0, "", 2), le64(3), le64(0), le64(8)})))
              .error() ==
          "malformed message: RAIL: memory (8 bytes at offset 37) past the end of a 37-byte body");
    CHECK(round(frame(RailMake::type, cat({rail_head(0, "", 1), le64(3), le64(0), le64(8),
                                           std::vector<std::uint8_t>{0}})))
              .error() == "malformed message: RAIL: 1 trailing byte");
    // Limits: the peer's name, and the parts list, refused before anything is read for them.
    CHECK(round(frame(RailMake::type,
                      cat({le32(7), std::vector<std::uint8_t>{0}, le32(name_bytes_max + 1)})))
              .error() == "malformed message: RAIL: peer length 1025 over the maximum 1024");
    CHECK(round(frame(RailMake::type, rail_head(0, "b", rail_transfers_max + 1))).error() ==
          "malformed message: RAIL: parts count 4097 over the maximum 4096");
    CHECK(round(frame(RailMake::type, cat({rail_head(0, "b", 4096), le64(1)}))).error() ==
          "malformed message: RAIL: parts count 4096 past the end of the body");
    // The others, short and long.
    CHECK(round(frame(RailMade::type, {})).error() ==
          "malformed message: RAILED: why length (4 bytes at offset 0) past the end of a 0-byte "
          "body");
    CHECK(round(frame(RailGo::type, le32(1))).error() ==
          "malformed message: RAIL_GO: round (8 bytes at offset 4) past the end of a 4-byte body");
    CHECK(round(frame(RailExpect::type, cat({le32(1), le64(1), std::vector<std::uint8_t>{0}})))
              .error() == "malformed message: RAIL_EXPECT: 1 trailing byte");
    CHECK(round(frame(RailReady::type, {1, 0})).error() ==
          "malformed message: RAIL_READY: rail (4 bytes at offset 0) past the end of a 2-byte "
          "body");
    CHECK(round(frame(RailChunk::type, cat({le32(1), le64(2), le32(3)}))).error() ==
          "malformed message: RAIL_CHUNK: offset (8 bytes at offset 16) past the end of a 16-byte "
          "body");
    CHECK(round(frame(RailCount::type, cat({le32(1), std::vector<std::uint8_t>{1}}))).error() ==
          "malformed message: RAIL_COUNT: value (8 bytes at offset 5) past the end of a 5-byte "
          "body");
    CHECK(round(frame(RailEnd::type, cat({le32(1), le32(2)}))).error() ==
          "malformed message: RAIL_END: 4 trailing bytes");
  }

  TEST_CASE("the encoder refuses a RAIL over its limits and leaves the output as it was") {
    std::vector<std::uint8_t> out = encoded(Heartbeat{});
    CHECK_THROWS_WITH_AS(
        encode(RailMake{1, 0, "", std::vector<WireRailPart>(rail_transfers_max + 1)}, out),
        "rig: RAIL parts of 4097 entries over the maximum 4096", std::invalid_argument);
    CHECK_THROWS_WITH_AS(encode(RailMake{1, 0, std::string(name_bytes_max + 1, 'p'), {}}, out),
                         "rig: RAIL peer of 1025 bytes over the maximum 1024",
                         std::invalid_argument);
    CHECK(out == encoded(Heartbeat{}));
  }
}
