// An agent in a process of its own, for tests that break what serve relies on.
//   rig-test-agent KEY_FILE [--break-listener] [--sim] [--timing-divisor N] [--slow-opener MS]
//                  [--throwing-opener] [--signals] [--throwing-log] [--lose-after-ms MS]
// Listens at 127.0.0.1, port 0, and prints "listening 127.0.0.1:PORT" as rigd does.
// --break-listener then shuts the listening socket down, so that every accept fails (EINVAL on
// Linux). --sim serves SIM devices as rigd does, but with no check of the RIG_* tunables at start,
// so that a bad one fails the job when its opener runs. --timing-divisor scales the liveness times
// down as rigd's test option does. --slow-opener serves the kind SLOW, whose opener prints
// "opening", sleeps MS and opens the SIM devices. --throwing-opener serves the kind THROW, whose
// opener throws an int. --signals counts SIGUSR1 in a handler; serve's log line prints "step:
// SIGUSR1 blocked" (or "open"), and the kind SIGNALS's opener "opener: SIGUSR1 open, handled N"
// (or "blocked") before it opens the SIM devices. --throwing-log makes serve's log line throw.
// Serves one job and prints "closed", or "error: WHY" and exits 1; "interrupted" if a break
// (SIGINT) ended serve; --lose-after-ms serves the kind LOSE, whose opener opens the SIM devices
// and MS later loses the first of them (not by a close), printing "lost" as it does; "raised: WHAT"
// and then "listening" or "not listening" (whether a connect to the port is taken) if serve raised
// something else.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "remote/agent/agent.hpp"
#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

std::atomic<int> usr1_handled{0};

void on_usr1(int) {
  usr1_handled.fetch_add(1);
}

const char* usr1_state() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, SIGUSR1) ? "blocked" : "open";
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Whether something accepts a TCP connection at 127.0.0.1:port.
bool accepts(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(s);
  return ok;
}

rig::Result<std::vector<rig::Device>> sim_devices() {
  return rig::open(rig::Kind::sim);
}

}  // namespace

int main(int argc, char** argv) {
  bool break_listener = false, sim = false, throwing_opener = false, signals = false,
       throwing_log = false;
  int divisor = 1, slow_ms = -1, lose_ms = -1;
  bool known = argc >= 2;
  for (int i = 2; known && i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--break-listener") {
      break_listener = true;
    } else if (arg == "--sim") {
      sim = true;
    } else if (arg == "--throwing-opener") {
      throwing_opener = true;
    } else if (arg == "--signals") {
      signals = true;
    } else if (arg == "--throwing-log") {
      throwing_log = true;
    } else if (arg == "--timing-divisor" && i + 1 < argc) {
      divisor = std::atoi(argv[++i]);
    } else if (arg == "--slow-opener" && i + 1 < argc) {
      slow_ms = std::atoi(argv[++i]);
    } else if (arg == "--lose-after-ms" && i + 1 < argc) {
      lose_ms = std::atoi(argv[++i]);
    } else {
      known = false;
    }
  }
  if (!known || divisor < 1) {
    std::fprintf(stderr,
                 "usage: rig-test-agent KEY_FILE [--break-listener] [--sim] [--timing-divisor N] "
                 "[--slow-opener MS] [--throwing-opener] [--signals] [--throwing-log] "
                 "[--lose-after-ms MS]\n");
    return 2;
  }
  if (divisor > 1) rig::remote::set_job_timing(rig::remote::Timing{}.scaled_down(divisor));
  rig::remote::catch_break(true);
  if (signals) {
    struct sigaction sa {};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, nullptr);
  }
  auto key = rig::remote::read_key(argv[1]);
  if (!key) {
    say("error: " + key.error());
    return 1;
  }
  auto agent = rig::remote::listen(*key, "127.0.0.1", 0);
  if (!agent) {
    say("error: " + agent.error());
    return 1;
  }
  const int port = agent->port();
  say(rig::remote::listening_line("127.0.0.1", port));
  if (break_listener) ::shutdown(rig::remote::listener_fd(*agent), SHUT_RD);
  std::vector<std::pair<std::string, rig::remote::Opener>> kinds;
  if (sim) kinds.emplace_back("SIM", sim_devices);
  if (slow_ms >= 0) {
    kinds.emplace_back("SLOW", [slow_ms]() -> rig::Result<std::vector<rig::Device>> {
      say("opening");
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      return sim_devices();
    });
  }
  if (lose_ms >= 0) {
    kinds.emplace_back("LOSE", [lose_ms]() -> rig::Result<std::vector<rig::Device>> {
      auto devices = sim_devices();
      if (devices && !devices->empty()) {
        std::thread([lose_ms, d = devices->front()] {
          std::this_thread::sleep_for(std::chrono::milliseconds(lose_ms));
          say("lost");
          d.core()->lose(d.name() + ": lost for the test");
        }).detach();
      }
      return devices;
    });
  }
  if (throwing_opener) {
    kinds.emplace_back("THROW", []() -> rig::Result<std::vector<rig::Device>> { throw 42; });
  }
  if (signals) {
    rig::remote::AgentEvents events;
    events.log = [](const std::string&) { say(std::string("step: SIGUSR1 ") + usr1_state()); };
    rig::remote::set_agent_events(std::move(events));
    kinds.emplace_back("SIGNALS", []() -> rig::Result<std::vector<rig::Device>> {
      say(std::string("opener: SIGUSR1 ") + usr1_state() + ", handled " +
          std::to_string(usr1_handled.load()));
      return sim_devices();
    });
  }
  if (throwing_log) {
    rig::remote::AgentEvents events;
    events.log = [](const std::string&) { throw std::runtime_error("the log broke"); };
    rig::remote::set_agent_events(std::move(events));
  }
  try {
    auto r = rig::remote::serve(*agent, kinds);
    if (!r) {
      say("error: " + r.error());
      return 1;
    }
  } catch (const rig::remote::Break&) {
    say("interrupted");
    return 1;
  } catch (const std::exception& e) {
    say(std::string("raised: ") + e.what());
    say(accepts(port) ? "listening" : "not listening");
    return 1;
  }
  say("closed");
  return 0;
}
