#include "remote/wire/wire.hpp"

#include <algorithm>

namespace rig::remote {

std::span<const std::uint8_t> Reader::take(std::string_view field, std::size_t n) {
  if (!ok()) return {};
  if (n > body_.size() - at_) {
    error_ = std::string(what_) + ": " + std::string(field) + " (" + std::to_string(n) +
             (n == 1 ? " byte" : " bytes") + " at offset " + std::to_string(at_) +
             ") past the end of a " + std::to_string(body_.size()) + "-byte body";
    return {};
  }
  auto out = body_.subspan(at_, n);
  at_ += n;
  return out;
}

std::uint8_t Reader::u8(std::string_view field) {
  auto b = take(field, 1);
  return b.empty() ? 0 : b[0];
}

std::uint32_t Reader::u32(std::string_view field) {
  auto b = take(field, 4);
  return b.empty() ? 0 : load_u32(b.data());
}

std::uint64_t Reader::u64(std::string_view field) {
  auto b = take(field, 8);
  if (b.empty()) return 0;
  return std::uint64_t{load_u32(b.data())} | std::uint64_t{load_u32(b.data() + 4)} << 32;
}

std::span<const std::uint8_t> Reader::bytes(std::string_view field, std::size_t n) {
  return take(field, n);
}

std::string Reader::string(std::string_view field, std::size_t max) {
  if (!ok()) return {};
  // The length is named after the field, so that "reason length" reads naturally in both errors.
  const std::string length_field = std::string(field) + " length";
  const std::uint32_t n = u32(length_field);
  if (!ok()) return {};
  if (n > max) {
    error_ = std::string(what_) + ": " + length_field + " " + std::to_string(n) +
             " over the maximum " + std::to_string(max);
    return {};
  }
  if (n > body_.size() - at_) {
    error_ = std::string(what_) + ": " + length_field + " " + std::to_string(n) +
             " past the end of a " + std::to_string(body_.size()) + "-byte body";
    return {};
  }
  std::string out(reinterpret_cast<const char*>(body_.data() + at_), n);
  at_ += n;
  return out;
}

void Reader::fail(std::string_view why) {
  if (ok()) error_ = std::string(what_) + ": " + std::string(why);
}

bool Reader::finish() {
  if (ok() && at_ != body_.size())
    error_ = std::string(what_) + ": " + std::to_string(body_.size() - at_) +
             (body_.size() - at_ == 1 ? " trailing byte" : " trailing bytes");
  return ok();
}

std::string hex_byte(std::uint8_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  return std::string{'0', 'x', digits[v >> 4], digits[v & 15]};
}

}  // namespace rig::remote
