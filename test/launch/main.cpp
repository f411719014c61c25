// The launch suite's runner: it runs only where the engines can, and otherwise says why and exits
// 77, which meson counts as a skip, never as a pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "net.hpp"

int main(int argc, char** argv) {
  if (const std::string why = rig::test::launch_unavailable(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
