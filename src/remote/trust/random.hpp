// Secret randomness for keys, nonces and identifiers, from the system's CSPRNG through libsodium.
#pragma once

#include <cstdint>
#include <span>

namespace rig::remote {

// Fills `out` with random bytes. Initialises libsodium on first use (thread-safe); raises
// std::runtime_error if it cannot, which only a broken system does.
void random_bytes(std::span<std::uint8_t> out);

}  // namespace rig::remote
