// An agent in a process of its own, for tests that break what serve relies on.
//   rig-test-agent KEY_FILE [--break-listener] [--sim]
// Listens at 127.0.0.1, port 0, and prints "listening 127.0.0.1:PORT" as rigd does.
// --break-listener then shuts the listening socket down, so that every accept fails (EINVAL on
// Linux). --sim serves SIM devices as rigd does, but with no check of the RIG_* tunables at start,
// so that a bad one fails the job when its opener runs. Serves one job and prints "closed", or
// "error: WHY" and exits 1.
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "remote/agent/agent.hpp"
#include "remote/io/address.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

int main(int argc, char** argv) {
  bool break_listener = false;
  bool sim = false;
  bool known = argc >= 2;
  for (int i = 2; i < argc; ++i) {
    break_listener = break_listener || std::strcmp(argv[i], "--break-listener") == 0;
    sim = sim || std::strcmp(argv[i], "--sim") == 0;
    known = known &&
            (std::strcmp(argv[i], "--break-listener") == 0 || std::strcmp(argv[i], "--sim") == 0);
  }
  if (!known) {
    std::fprintf(stderr, "usage: rig-test-agent KEY_FILE [--break-listener] [--sim]\n");
    return 2;
  }
  auto key = rig::remote::read_key(argv[1]);
  if (!key) {
    std::printf("error: %s\n", key.error().c_str());
    return 1;
  }
  auto agent = rig::remote::listen(*key, "127.0.0.1", 0);
  if (!agent) {
    std::printf("error: %s\n", agent.error().c_str());
    return 1;
  }
  std::printf("%s\n", rig::remote::listening_line("127.0.0.1", agent->port()).c_str());
  std::fflush(stdout);
  if (break_listener) ::shutdown(rig::remote::listener_fd(*agent), SHUT_RD);
  std::vector<std::pair<std::string, rig::remote::Opener>> kinds;
  if (sim) {
    kinds.emplace_back(
        "SIM", []() -> rig::Result<std::vector<rig::Device>> { return rig::open(rig::Kind::sim); });
  }
  auto r = rig::remote::serve(*agent, kinds);
  if (!r) {
    std::printf("error: %s\n", r.error().c_str());
    return 1;
  }
  std::printf("closed\n");
  return 0;
}
