#include "core/arch.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rig::detail {
namespace {

std::vector<std::string> detect() {
#if defined(__x86_64__)
  // The psABI's levels, from cpuid (the compilers' __builtin_cpu_supports names differ): each
  // level needs every feature of the one below plus its own, and the AVX levels need the OS to
  // save the wider registers (xgetbv).
  unsigned a, b, c, d;
  unsigned c1 = 0, b7 = 0, cx = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) c1 = c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) b7 = b;
  if (__get_cpuid(0x80000001, &a, &b, &c, &d)) cx = c;
  auto bit = [](unsigned word, int n) { return ((word >> n) & 1u) != 0; };
  unsigned long long xcr0 = 0;
  if (bit(c1, 27)) {  // OSXSAVE: xgetbv is available
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool v2 = bit(c1, 0) && bit(c1, 9) && bit(c1, 13) && bit(c1, 19) && bit(c1, 20) &&
                  bit(c1, 23) && bit(cx, 0);
  const bool v3 = v2 && (xcr0 & 0x6) == 0x6 && bit(c1, 28) && bit(c1, 12) && bit(c1, 22) &&
                  bit(c1, 29) && bit(b7, 3) && bit(b7, 5) && bit(b7, 8) && bit(cx, 5);
  const bool v4 = v3 && (xcr0 & 0xe0) == 0xe0 && bit(b7, 16) && bit(b7, 17) && bit(b7, 28) &&
                  bit(b7, 30) && bit(b7, 31);
  std::vector<std::string> levels;
  if (v4) levels.push_back("x86_64-v4");
  if (v3) levels.push_back("x86_64-v3");
  if (v2) levels.push_back("x86_64-v2");
  levels.push_back("x86_64");
  return levels;
#elif defined(__aarch64__)
  return {"aarch64"};
#else
#error "rig supports x86-64 and 64-bit Arm hosts"
#endif
}

}  // namespace

const std::vector<std::string>& host_isa_levels() {
  static const std::vector<std::string> levels = detect();
  return levels;
}

const std::string& host_isa_level() {
  return host_isa_levels().front();
}

}  // namespace rig::detail
