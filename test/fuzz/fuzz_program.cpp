// libFuzzer target for the rig.program reader. Each input is parsed twice: as it is, which is what
// a damaged file looks like (the checksum stops nearly all of it), and with its checksum made
// right, which is what a file crafted on purpose looks like and reaches every record check. The
// reader must refuse with a reason or hand out targets that obey the format's rules; anything
// else, or a crash, or an out-of-bounds read under ASan, is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program/format.hpp"
#include "rig/program.hpp"

namespace {

[[noreturn]] void finding() {
  std::abort();
}

void check(const std::vector<std::byte>& bytes) {
  auto r = rig::Program::parse(bytes);
  if (!r) {
    if (r.error().rfind("rig.program: ", 0) != 0) finding();
    return;
  }
  const rig::Program& p = *r;
  const std::byte* begin = p.bytes().data();
  const std::byte* end = begin + p.bytes().size();
  if (p.bytes().size() != bytes.size() || std::memcmp(begin, bytes.data(), bytes.size()) != 0) {
    finding();
  }
  if (p.targets().empty() || p.targets().size() > rig::program::targets_max) finding();
  const std::byte* next =
      begin + rig::program::header_bytes + p.targets().size() * rig::program::target_record_bytes;
  std::vector<rig::TargetSpec> specs;
  for (const rig::Target& t : p.targets()) {
    if (t.payload.empty() || t.payload.data() < next || t.payload.data() > end ||
        t.payload.size() > static_cast<std::size_t>(end - t.payload.data())) {
      finding();
    }
    if (t.arch.empty() || t.arch.size() >= rig::program::arch_bytes) finding();
    next = t.payload.data() + t.payload.size();
    specs.push_back({t.format, t.arch, {t.payload.begin(), t.payload.end()}});
  }
  if (next != end) finding();
  // What the reader accepts, the writer can write again, and that reads back the same.
  auto again = rig::Program::parse(rig::write_program(specs));
  if (!again || again->targets().size() != specs.size()) finding();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const rig::Target& t = again->targets()[i];
    if (t.format != specs[i].format || t.arch != specs[i].arch ||
        t.payload.size() != specs[i].payload.size() ||
        std::memcmp(t.payload.data(), specs[i].payload.data(), t.payload.size()) != 0) {
      finding();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size != 0) std::memcpy(bytes.data(), data, size);
  check(bytes);
  if (size >= rig::program::header_bytes) {
    unsigned char sum[rig::program::checksum_bytes];
    rig::program::checksum(bytes, sum);
    std::memcpy(bytes.data() + rig::program::checksum_offset, sum, sizeof sum);
    check(bytes);
  }
  return 0;
}
