// The proofs' MAC: known answers computed independently (Python's hmac module), so another
// implementation of the protocol can check itself against the same numbers (docs/protocol.md).
#include "remote/trust/mac.hpp"

#include <string>

#include "remote/support.hpp"

using namespace rig::remote;
using rig::remote::test::bytes_of;
using rig::remote::test::from_hex;

namespace {

Key key_of_counting_bytes(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return key(s).value();
}

std::vector<std::uint8_t> vec(const Mac& m) {
  return {m.begin(), m.end()};
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("proofs match HMAC-SHA-512-256 under per-direction keys derived from the job key") {
    const MacKeys keys(key_of_counting_bytes(32));
    const auto transcript = bytes_of("transcript");
    CHECK(vec(keys.prove(Direction::dialer, transcript)) ==
          from_hex("32368e65e3a827b697aa183f09bc9cb958ada70c47c7c093582ea81d6afe98a1"));
    CHECK(vec(keys.prove(Direction::listener, transcript)) ==
          from_hex("b15d64abfa93c2002b92a3e465debcc0f6bc1110fa12a16f3c02e8d145726326"));
    // A key longer than HMAC's 128-byte block is hashed first, as HMAC specifies.
    const MacKeys long_keys(key_of_counting_bytes(200));
    CHECK(vec(long_keys.prove(Direction::dialer, transcript)) ==
          from_hex("c21ec379da5307510d86dcd13a496abe3297ed634dfecf92e2276743e0a8171d"));
  }

  TEST_CASE("a proof verifies only for its direction, its transcript and its key") {
    const MacKeys keys(key_of_counting_bytes(32));
    const auto transcript = bytes_of("transcript");
    const Mac proof = keys.prove(Direction::dialer, transcript);
    CHECK(keys.verify(Direction::dialer, transcript, proof));
    CHECK_FALSE(keys.verify(Direction::listener, transcript, proof));
    CHECK_FALSE(keys.verify(Direction::dialer, bytes_of("transcripT"), proof));
    CHECK_FALSE(MacKeys(key_of_counting_bytes(33)).verify(Direction::dialer, transcript, proof));
    for (std::size_t i = 0; i < proof.size(); ++i) {
      Mac flipped = proof;
      flipped[i] ^= 1;
      CHECK_FALSE(keys.verify(Direction::dialer, transcript, flipped));
    }
  }
}
