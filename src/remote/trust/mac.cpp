#include "remote/trust/mac.hpp"

#include <string_view>

namespace rig::remote {

namespace {

void derive(std::span<const std::uint8_t> key, std::string_view label, std::uint8_t* out) {
  crypto_auth_hmacsha512256_state state;
  crypto_auth_hmacsha512256_init(&state, key.data(), key.size());
  crypto_auth_hmacsha512256_update(&state, reinterpret_cast<const unsigned char*>(label.data()),
                                   label.size());
  crypto_auth_hmacsha512256_final(&state, out);
  // The state holds the padded job key.
  sodium_memzero(&state, sizeof state);
}

}  // namespace

static_assert(mac_bytes == crypto_auth_hmacsha512256_BYTES);

MacKeys::MacKeys(const Key& key) {
  derive(detail::key_bytes(key), dialer_label, dialer_.data());
  derive(detail::key_bytes(key), listener_label, listener_.data());
}

MacKeys::MacKeys(MacKeys&& other) noexcept : dialer_(other.dialer_), listener_(other.listener_) {
  sodium_memzero(other.dialer_.data(), other.dialer_.size());
  sodium_memzero(other.listener_.data(), other.listener_.size());
}

MacKeys::~MacKeys() {
  sodium_memzero(dialer_.data(), dialer_.size());
  sodium_memzero(listener_.data(), listener_.size());
}

Mac MacKeys::prove(Direction direction, std::span<const std::uint8_t> transcript) const noexcept {
  Mac out;
  crypto_auth_hmacsha512256(out.data(), transcript.data(), transcript.size(),
                            subkey(direction).data());
  return out;
}

bool MacKeys::verify(Direction direction, std::span<const std::uint8_t> transcript,
                     std::span<const std::uint8_t, mac_bytes> mac) const noexcept {
  // libsodium's verify recomputes the MAC and compares it with crypto_verify_32 (constant time).
  return crypto_auth_hmacsha512256_verify(mac.data(), transcript.data(), transcript.size(),
                                          subkey(direction).data()) == 0;
}

}  // namespace rig::remote
