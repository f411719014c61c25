// libFuzzer target: rigd's request parser (tools/rigd/http.*) and the endpoint's routing on
// arbitrary bytes.
//
// The first byte picks how the rest is cut into pieces, as a socket might deliver it. Whatever
// comes, the parser keeps at most its bound, ends in one state however the bytes are cut, and a
// response is made for every head it finishes with, never a crash, a sanitizer report or an
// exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "rigd/http.hpp"

using rig::rigd::HttpRequestParser;

namespace {

HttpRequestParser::State feed(HttpRequestParser& p, std::span<const std::uint8_t> stream,
                              std::size_t piece) {
  auto s = HttpRequestParser::State::incomplete;
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    s = p.feed(stream.subspan(at, std::min(piece, stream.size() - at)));
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::span<const std::uint8_t> stream(data + 1, size - 1);

  HttpRequestParser cut;
  HttpRequestParser whole;
  const auto s = feed(cut, stream, piece);
  // However the bytes are cut, the same verdict: the head's end is found across pieces.
  if (s != feed(whole, stream, stream.size() + 1)) std::abort();
  switch (s) {
    case HttpRequestParser::State::done:
      if (cut.request().method != whole.request().method ||
          cut.request().target != whole.request().target || cut.request().method.empty() ||
          cut.request().target.empty()) {
        std::abort();
      }
      break;
    case HttpRequestParser::State::bad:
      if (cut.status() != whole.status() || cut.why() != whole.why()) std::abort();
      if (cut.status() != 400 && cut.status() != 431 && cut.status() != 505) std::abort();
      break;
    case HttpRequestParser::State::incomplete:
      // Still waiting: only while within the bound.
      if (stream.size() > rig::rigd::http_head_bytes_max + 4) std::abort();
      break;
  }
  (void)rig::rigd::http_response(cut.status() == 0 ? 200 : cut.status(), "text/plain", "x");
  return 0;
}
