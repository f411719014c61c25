// The field reader and writer: little-endian layout and every bounds refusal.
#include "remote/wire/wire.hpp"

#include "remote/support.hpp"

using rig::remote::Reader;
using rig::remote::Writer;

TEST_SUITE("unit") {
  TEST_CASE("the writer lays fields out little-endian and the reader reads them back") {
    std::vector<std::uint8_t> out;
    Writer w(out);
    w.u8(0xab);
    w.u32(0x01020304);
    w.u64(0x0102030405060708);
    w.string("hi");
    CHECK(out == std::vector<std::uint8_t>{0xab, 4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1, 2, 0, 0, 0,
                                           'h', 'i'});
    Reader r("TEST", out);
    CHECK(r.u8("a") == 0xab);
    CHECK(r.u32("b") == 0x01020304);
    CHECK(r.u64("c") == 0x0102030405060708);
    CHECK(r.string("d", 2) == "hi");
    CHECK(r.finish());
  }

  TEST_CASE("the reader names the first field past the end and keeps that reason") {
    const std::vector<std::uint8_t> body{1, 2, 3};
    Reader r("TEST", body);
    CHECK(r.u8("kind") == 1);
    CHECK(r.u32("count") == 0);
    CHECK(r.u8("later") == 0);
    CHECK_FALSE(r.finish());
    CHECK(r.error() == "TEST: count (4 bytes at offset 1) past the end of a 3-byte body");

    Reader one("TEST", std::span<const std::uint8_t>{});
    one.u8("flag");
    CHECK(one.error() == "TEST: flag (1 byte at offset 0) past the end of a 0-byte body");
  }

  TEST_CASE("the reader refuses a string over its limit or past the end, and trailing bytes") {
    const std::vector<std::uint8_t> over{5, 0, 0, 0, 'a', 'b', 'c', 'd', 'e'};
    Reader a("TEST", over);
    CHECK(a.string("text", 4).empty());
    CHECK(a.error() == "TEST: text length 5 over the maximum 4");

    const std::vector<std::uint8_t> past{90, 0, 0, 0, 'a'};
    Reader b("TEST", past);
    b.string("text", 100);
    CHECK(b.error() == "TEST: text length 90 past the end of a 5-byte body");

    const std::vector<std::uint8_t> cut{1, 0};
    Reader c("TEST", cut);
    c.string("text", 100);
    CHECK(c.error() == "TEST: text length (4 bytes at offset 0) past the end of a 2-byte body");

    const std::vector<std::uint8_t> extra{7, 8, 9};
    Reader d("TEST", extra);
    d.u8("x");
    CHECK_FALSE(d.finish());
    CHECK(d.error() == "TEST: 2 trailing bytes");
    Reader e("TEST", extra);
    e.u8("x");
    e.u8("y");
    e.finish();
    CHECK(e.error() == "TEST: 1 trailing byte");
  }

  TEST_CASE("a decoder's own check joins the reader's reasons, and the first reason wins") {
    const std::vector<std::uint8_t> body{9};
    Reader r("TEST", body);
    r.u8("role");
    r.fail("role 9 unknown");
    r.fail("a later complaint");
    CHECK(r.error() == "TEST: role 9 unknown");
    CHECK(rig::remote::hex_byte(0x7f) == "0x7f");
    CHECK(rig::remote::hex_byte(0x00) == "0x00");
  }
}
