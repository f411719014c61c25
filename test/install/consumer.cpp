// A first program as a user would write it, built by check.sh against the installed tree alone:
// bytes from this process's memory through a SIM device and back, every byte compared.
#include <rig/rig.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t bytes = 1 << 20;
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 131 + (i >> 9));

  const std::vector<rig::Device> sims = rig::open(rig::Kind::sim);
  if (sims.empty()) {
    std::fprintf(stderr, "consumer: rig::open(Kind::sim) found no SIM device\n");
    return 1;
  }
  const rig::Device& sim = sims.front();
  const rig::Buffer src = rig::Buffer::borrow(in.data(), bytes);
  const rig::Buffer dst = rig::Buffer::borrow(out.data(), bytes);
  const rig::Buffer on_sim = rig::Buffer::make(sim, bytes);

  // Not waited on: ordering by memory runs the copy back after the copy there.
  rig::copy(on_sim, src);
  rig::copy(dst, on_sim);
  const auto seen = dst.access();
  for (std::size_t i = 0; i < bytes; ++i) {
    if (static_cast<unsigned char>(seen[i]) != in[i]) {
      std::fprintf(stderr, "consumer: byte %zu came back as %u, sent %u\n", i,
                   static_cast<unsigned>(seen[i]), static_cast<unsigned>(in[i]));
      return 1;
    }
  }
  std::printf("consumer: %zu bytes from %s to %s and back\n", bytes, rig::host().name().c_str(),
              sim.name().c_str());
  return 0;
}
