// libFuzzer target: the frame decoder and the codec on arbitrary bytes.
//
// The first byte picks how the rest is cut into pieces, as a socket might deliver it. Every frame
// that decodes must encode back to exactly the bytes it came from; anything else must be an error
// value, never a crash, a sanitizer report or an exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "remote/wire/codec.hpp"
#include "remote/wire/frame.hpp"

using namespace rig::remote;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::span<const std::uint8_t> stream(data + 1, size - 1);

  FrameDecoder decoder;
  std::size_t consumed = 0;  // stream bytes returned in frames so far
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    decoder.feed(stream.subspan(at, std::min(piece, stream.size() - at)));
    for (;;) {
      auto frame = decoder.next();
      if (!frame.ok()) return 0;
      if (!frame->has_value()) break;
      const Frame f = **frame;
      const std::size_t frame_bytes = frame_header_bytes + f.body.size();
      auto message = decode(f);
      if (message.ok()) {
        std::vector<std::uint8_t> again;
        encode(*message, again);
        const auto original = stream.subspan(consumed, frame_bytes);
        if (again.size() != original.size() ||
            !std::equal(again.begin(), again.end(), original.begin()))
          std::abort();
      }
      consumed += frame_bytes;
    }
  }
  return 0;
}
