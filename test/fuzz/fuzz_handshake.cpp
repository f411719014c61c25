// libFuzzer target: the handshake fed arbitrary bytes.
//
// The first byte picks the end and the piece size: mostly the listener (the end a stranger reaches
// first), sometimes the dialer after a real greeting, so that made-up replies are parsed too. Each
// run must end refused or waiting for more, never crash, throw or take bytes past its messages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "remote/trust/handshake.hpp"

using namespace rig::remote;

namespace {

const Key& fuzz_key() {
  static const Key k = key("fuzzing-key-0123456789abcdef").value();
  return k;
}

void feed_all(Handshake& h, std::span<const std::uint8_t> input, std::size_t piece) {
  for (std::size_t at = 0; at < input.size(); at += piece) {
    const auto chunk = input.subspan(at, std::min(piece, input.size() - at));
    const std::size_t used = h.feed(chunk);
    if (used > chunk.size()) std::abort();
    if (used < chunk.size() && !h.done() && h.state() != Handshake::State::verified) std::abort();
    if (h.state() == Handshake::State::verified) h.admit(std::nullopt);
    (void)h.take_output();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t piece = 1 + (mode >> 2) % 32;
  const std::span<const std::uint8_t> input(data + 1, size - 1);
  static const InstanceId ours = new_instance_id();
  static const InstanceId theirs = new_instance_id();
  static const JobId job = new_job_id();

  if (mode % 4 != 3) {
    auto listener = Handshake::listener(fuzz_key(), {ours});
    (void)listener.take_output();
    feed_all(listener, input, piece);
    listener.end_of_input();
    if (listener.state() != Handshake::State::refused &&
        listener.state() != Handshake::State::proven)
      std::abort();
  } else {
    auto listener = Handshake::listener(fuzz_key(), {theirs});
    auto dialer =
        Handshake::dialer(fuzz_key(), {Role::controller, "controller", job, "agent", ours});
    const auto greeting = listener.take_output();
    if (dialer.feed(greeting) != greeting.size()) std::abort();
    (void)dialer.take_output();
    feed_all(dialer, input, piece);
    dialer.end_of_input();
    if (!dialer.done()) std::abort();
  }
  return 0;
}
