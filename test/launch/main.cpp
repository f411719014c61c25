// The launch suite's runner: it runs only where the engines can, and otherwise says why and exits
// 77, which meson counts as a skip, never as a pass. --engine=ssh or --engine=slurm (meson passes
// one, with the test cases of that engine) says which engine's needs to check.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "net.hpp"

int main(int argc, char** argv) {
  std::string engine = "ssh";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.starts_with("--engine=")) {
      engine = a.substr(std::string("--engine=").size());
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (const std::string why = rig::test::launch_unavailable(engine); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  return context.run();
}
