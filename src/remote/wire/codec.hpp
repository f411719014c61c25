// Messages to frames and back. Pure: no I/O, no state, so it can be fuzzed and tested exhaustively.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remote/wire/frame.hpp"
#include "remote/wire/messages.hpp"
#include "remote/wire/wire.hpp"
#include "rig/result.hpp"

namespace rig::remote {

// Appends the whole frame of `message` (header and body) to `out`. Raises std::invalid_argument if
// a field is over its limit: the sender checks what it sends (clamp_reason for an abort's cause).
void encode(const Message& message, std::vector<std::uint8_t>& out);
void encode(const Message& message, Bytes& out);
// A submission's frame, without copying it into a Message first (the submit path's own).
void encode(const Submit& message, Bytes& out);
// The bytes encode(message, out) appends: its header and body.
std::size_t frame_bytes(const Submit& message);
// RAIL_CHUNK's whole frame written at the start of `out`, with no allocation (a round that host
// code writes from its own thread, a signal handler's maybe): rail_chunk_frame_bytes, or 0 if
// `out` is too small for them.
inline constexpr std::size_t rail_chunk_frame_bytes = frame_header_bytes + 4 + 8 + 4 + 8 + 1;
std::size_t encode_into(const RailChunk& message, std::span<std::uint8_t> out) noexcept;
// A RAIL_COUNT's whole frame (rail, which, value): what a reader of a lent socket passes on.
inline constexpr std::size_t rail_count_frame_bytes = frame_header_bytes + 4 + 1 + 8;

// The message in a frame from FrameDecoder, every field checked. The Error starts
// "malformed message: " and names the message and the field, as in
// "malformed message: ABORT: reason length 90 past the end of a 12-byte body".
Result<Message> decode(const Frame& frame);

// `why` cut to reason_bytes_max, at a UTF-8 character boundary, so that any root cause can travel
// in an ABORT.
std::string clamp_reason(std::string_view why);

}  // namespace rig::remote
