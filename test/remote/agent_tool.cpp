// An agent in a process of its own, for tests that break what serve relies on.
//   rig-test-agent KEY_FILE [--break-listener]
// Listens at 127.0.0.1, port 0, and prints "listening PORT". --break-listener then shuts the
// listening socket down, so that every accept fails (EINVAL on Linux). Serves one job and prints
// "closed", or "error: WHY" and exits 1.
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "remote/agent/agent.hpp"
#include "rig/remote.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: rig-test-agent KEY_FILE [--break-listener]\n");
    return 2;
  }
  const bool break_listener = argc > 2 && std::strcmp(argv[2], "--break-listener") == 0;
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
  std::printf("listening %d\n", agent->port());
  std::fflush(stdout);
  if (break_listener) ::shutdown(rig::remote::listener_fd(*agent), SHUT_RD);
  auto r = rig::remote::serve(*agent, {});
  if (!r) {
    std::printf("error: %s\n", r.error().c_str());
    return 1;
  }
  std::printf("closed\n");
  return 0;
}
