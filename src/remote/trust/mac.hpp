// The handshake's proofs: MACs over a connection's transcript under keys derived from the job's
// key, one per direction, so a proof made for one direction never verifies for the other.
#pragma once

#include <sodium.h>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "remote/limits.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

// Which end of a connection made a proof.
enum class Direction : std::uint8_t { dialer, listener };

using Mac = std::array<std::uint8_t, mac_bytes>;

// The two MAC keys derived from a job's key:
//   key(direction) = HMAC-SHA-512-256(job key, label(direction))
//   proof          = HMAC-SHA-512-256(key(direction), transcript)
// libsodium 1.0.18 has no HKDF; one HMAC of a fixed label under the whole job key (HMAC accepts any
// key length) is HKDF's expand step with a single block, which is all 32 bytes need.
//
// Owner: one handshake. Immutable after construction, so readable from any thread. Both derived
// keys are wiped when it is destroyed or moved from.
class MacKeys {
 public:
  explicit MacKeys(const Key& key);
  MacKeys(MacKeys&& other) noexcept;
  MacKeys(const MacKeys&) = delete;
  MacKeys& operator=(const MacKeys&) = delete;
  MacKeys& operator=(MacKeys&&) = delete;
  ~MacKeys();

  Mac prove(Direction direction, std::span<const std::uint8_t> transcript) const noexcept;
  // In time independent of where `mac` differs from the right proof.
  bool verify(Direction direction, std::span<const std::uint8_t> transcript,
              std::span<const std::uint8_t, mac_bytes> mac) const noexcept;

 private:
  using Subkey = std::array<std::uint8_t, crypto_auth_hmacsha512256_KEYBYTES>;
  const Subkey& subkey(Direction d) const noexcept {
    return d == Direction::dialer ? dialer_ : listener_;
  }
  Subkey dialer_;
  Subkey listener_;
};

// The derivation labels, fixed forever for protocol version 1 (docs/protocol.md).
inline constexpr std::string_view dialer_label = "rig 1 handshake: dialer proof";
inline constexpr std::string_view listener_label = "rig 1 handshake: listener proof";

}  // namespace rig::remote
