#include "remote/trust/random.hpp"

#include <sodium.h>

#include <stdexcept>

namespace rig::remote {

void random_bytes(std::span<std::uint8_t> out) {
  // sodium_init is idempotent and takes its own lock, but a static keeps the check off later calls.
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw std::runtime_error("libsodium cannot initialise (no system randomness)");
  randombytes_buf(out.data(), out.size());
}

}  // namespace rig::remote
