#include "remote/wire/frame.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "remote/wire/messages.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

void write_frame_header(std::span<std::uint8_t, frame_header_bytes> out, std::uint8_t type,
                        std::size_t body_bytes) {
  if (body_bytes > frame_bytes_max - 1)
    throw std::invalid_argument("rig: a " + std::to_string(body_bytes) +
                                "-byte message body exceeds the frame maximum of " +
                                std::to_string(frame_bytes_max) + " bytes");
  store_u32(out.data(), static_cast<std::uint32_t>(body_bytes + 1));
  out[frame_length_field_bytes] = type;
}

std::span<std::uint8_t> FrameDecoder::prepare(std::size_t bytes) {
  if (begin_ == end_) begin_ = end_ = 0;
  if (buffer_.size() - end_ < bytes) {
    // Move what is left to the front first; grow only if that is not enough room.
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buffer_.size() - end_ < bytes) buffer_.resize(std::max(end_ + bytes, buffer_.size() * 2));
  }
  prepared_ = bytes;
  return {buffer_.data() + end_, bytes};
}

void FrameDecoder::commit(std::size_t bytes) {
  if (bytes > prepared_)
    throw std::invalid_argument("rig: FrameDecoder::commit of " + std::to_string(bytes) +
                                " bytes after prepare() gave " + std::to_string(prepared_));
  end_ += bytes;
  prepared_ = 0;
}

void FrameDecoder::feed(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return;
  std::memcpy(prepare(bytes.size()).data(), bytes.data(), bytes.size());
  commit(bytes.size());
}

Result<std::optional<Frame>> FrameDecoder::next() {
  if (error_) return *error_;
  const std::size_t have = end_ - begin_;
  if (have < frame_length_field_bytes) return std::optional<Frame>{};
  const std::uint8_t* at = buffer_.data() + begin_;
  const std::uint32_t length = load_u32(at);
  if (length == 0) {
    error_ = Error("malformed message: frame length 0 leaves no room for a type byte");
    return *error_;
  }
  if (length > frame_bytes_max) {
    error_ = Error("malformed message: frame length " + std::to_string(length) +
                   " over the maximum " + std::to_string(frame_bytes_max));
    return *error_;
  }
  if (have < frame_header_bytes) return std::optional<Frame>{};
  const std::uint8_t type = at[frame_length_field_bytes];
  if (message_name(type).empty()) {
    error_ = Error("malformed message: unknown type " + hex_byte(type));
    return *error_;
  }
  if (have - frame_length_field_bytes < length) return std::optional<Frame>{};
  begin_ += frame_length_field_bytes + length;
  return std::optional<Frame>(Frame{type, {at + frame_header_bytes, length - 1}});
}

std::optional<FrameDecoder::PartialBulk> FrameDecoder::partial_bulk() const {
  const std::size_t have = end_ - begin_;
  if (error_ || have < frame_header_bytes) return std::nullopt;
  const std::uint8_t* at = buffer_.data() + begin_;
  const std::uint32_t length = load_u32(at);
  const std::uint8_t type = at[frame_length_field_bytes];
  if (length == 0 || length > frame_bytes_max || !is_bulk(type)) return std::nullopt;
  if (have - frame_length_field_bytes >= length) return std::nullopt;  // whole: next() takes it
  return PartialBulk{
      type, length - std::size_t{1}, {at + frame_header_bytes, have - frame_header_bytes}};
}

void FrameDecoder::skip_partial_bulk() {
  begin_ = end_;
}

}  // namespace rig::remote
