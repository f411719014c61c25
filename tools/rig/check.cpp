// rig check --key FILE HOST:PORT...
//
// The operator's first tool: starts a job on those agents, makes round trips to each machine's
// host, opens every device kind each agent serves, copies a buffer to each device and back and
// checks every byte, prints what it found with the times, and closes the job. Exits 0 if every
// check passed and the job closed, 1 otherwise (each failure named), 2 on usage errors.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "remote/io/address.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

// Round trips per host: enough for a stable median, few enough to finish in well under a second.
constexpr int check_rounds = 200;
// Each device's copy: large enough to span several bulk frames each way (1 MiB chunks plus
// headers), small enough for any device's budget and a quick check.
constexpr std::size_t copy_bytes = (std::size_t{1} << 20) + 5;
// Copies there and back per device, each with bytes of its own, for a median and a max.
constexpr int copy_rounds = 5;
// The kinds of device asked of every agent: all of rig's but CPU, whose device is the host
// checked above.
constexpr rig::Kind device_kinds[] = {rig::Kind::sim, rig::Kind::cuda};

// Bytes that differ at every position and from one round to the next, so that a copy which
// returns stale, shifted or another round's bytes is caught.
void fill_pattern(std::vector<std::uint8_t>& v, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::uint8_t>(x);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Copies a pattern to `d` and back `copy_rounds` times and checks every byte. Prints the device's
// line and returns whether every byte came back; raises rig::Lost if the job fails.
bool check_device(const rig::Device& d, std::uint32_t& seed) {
  rig::Buffer there;
  try {
    there = rig::Buffer::make(d, copy_bytes);
  } catch (const rig::OutOfMemory& e) {
    std::printf("rig check: %s: cannot make a buffer of %zu bytes: %s\n", d.name().c_str(),
                copy_bytes, e.what());
    return false;
  }
  std::vector<std::uint8_t> sent(copy_bytes);
  std::vector<std::uint8_t> back(copy_bytes);
  std::vector<double> ms;
  for (int round = 0; round < copy_rounds; ++round) {
    fill_pattern(sent, seed++);
    // The destination starts as the complement of what was sent: no byte is right by accident.
    for (std::size_t i = 0; i < copy_bytes; ++i) back[i] = static_cast<std::uint8_t>(~sent[i]);
    const auto s = std::chrono::steady_clock::now();
    rig::copy(there, rig::Buffer::borrow(sent.data(), copy_bytes));
    rig::copy(rig::Buffer::borrow(back.data(), copy_bytes), there).wait();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
    const auto wrong = std::mismatch(sent.begin(), sent.end(), back.begin());
    if (wrong.first != sent.end()) {
      std::printf(
          "rig check: %s: a copy of %zu bytes there and back came back wrong: byte %zu is 0x%02x, "
          "0x%02x was sent\n",
          d.name().c_str(), copy_bytes, static_cast<std::size_t>(wrong.first - sent.begin()),
          *wrong.second, *wrong.first);
      return false;
    }
  }
  std::printf(
      "%-28s arch %-10s budget %7llu MiB  copy of %zu bytes there and back median %.2f ms, "
      "max %.2f ms, every byte checked\n",
      d.name().c_str(), d.arch().c_str(), static_cast<unsigned long long>(d.budget() >> 20),
      copy_bytes, median(ms), *std::max_element(ms.begin(), ms.end()));
  return true;
}

const char* const check_usage =
    "usage: rig check --key FILE HOST:PORT...\n"
    "  Starts a job on those agents, makes round trips to each machine's host, copies a buffer to\n"
    "  every device each agent serves and back, checking every byte, prints what it found and\n"
    "  closes the job. Exits 1 if any check fails.\n";

// Ctrl-C (or a SIGTERM) ends the check at once, as the signal would, after saying so: stdout is
// line-buffered (below), so every line printed before it is out already, even on a file or a
// pipe, where stdio would otherwise hold it until an exit that the signal never lets come.
constexpr char interrupted_line[] = "rig check: interrupted\n";

void on_interrupt(int sig) {
  (void)!write(STDOUT_FILENO, interrupted_line, sizeof interrupted_line - 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

int usage(const std::string& why) {
  std::fprintf(stderr, "rig check: %s\n%s", why.c_str(), check_usage);
  return rig::cli::exit_usage;
}

}  // namespace

int cmd_check(std::span<char*> args) {
  std::string key_file;
  std::vector<rig::remote::Address> agents;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == "--key") {
      if (i + 1 >= args.size()) return usage("--key needs a file");
      key_file = args[++i];
    } else if (a == "-h" || a == "--help") {
      std::fputs(check_usage, stdout);
      return rig::cli::exit_ok;
    } else {
      auto at = rig::remote::parse_address(a);
      if (!at) return usage("'" + a + "' is not HOST:PORT: " + at.error());
      agents.emplace_back(at->host, at->port);
    }
  }
  if (key_file.empty()) return usage("--key FILE is required");
  if (agents.empty()) return usage("name at least one agent as HOST:PORT");
  auto key = rig::remote::read_key(key_file);
  if (!key) {
    std::fprintf(stderr, "rig check: %s\n", key.error().c_str());
    return rig::cli::exit_usage;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<rig::Result<rig::remote::Job>> job;
  try {
    job.emplace(rig::remote::connect(*key, agents));
  } catch (const std::invalid_argument& e) {
    return usage(e.what());
  }
  if (!*job) {
    std::printf("rig check: the job did not start: %s\n", job->error().c_str());
    return rig::cli::exit_failure;
  }
  const double start_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("job started in %.1f ms\n", start_ms);
  int failures = 0;
  std::uint32_t seed = 1;
  try {
    for (const rig::Device& host : (**job).hosts()) {
      std::vector<double> us;
      for (int i = 0; i < check_rounds; ++i) {
        const auto s = std::chrono::steady_clock::now();
        host.wait(rig::submit(host, std::span<const rig::Part>{}));
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s)
                         .count());
      }
      std::printf("%-28s arch %-10s memory %7llu MiB  round trip median %.1f us, max %.1f us\n",
                  host.name().c_str(), host.arch().c_str(),
                  static_cast<unsigned long long>(host.budget() >> 20), median(us),
                  *std::max_element(us.begin(), us.end()));
      const std::string machine = host.name().substr(host.name().find('@') + 1);
      for (const rig::Kind kind : device_kinds) {
        const std::string kind_text(rig::kind_name(kind));
        auto devices = rig::remote::devices(host, kind_text);
        if (!devices) {
          // A kind the agent was not told to serve is no fault of the agent's.
          if (devices.error() == machine + ": serves no devices of kind " + kind_text) continue;
          // Any other Error is an opener that failed, or the job's root cause.
          if (auto f = (**job).failed()) throw rig::Lost(*f);
          std::printf("rig check: %s\n", devices.error().c_str());
          ++failures;
          continue;
        }
        for (const rig::Device& d : *devices) failures += check_device(d, seed) ? 0 : 1;
      }
    }
  } catch (const rig::Lost& e) {
    std::printf("rig check: the job failed: %s\n", e.what());
    (**job).close();
    return rig::cli::exit_failure;
  }
  (**job).close();
  if (auto f = (**job).failed()) {
    std::printf("rig check: the job failed: %s\n", f->c_str());
    return rig::cli::exit_failure;
  }
  if (failures > 0) {
    std::printf("closed; %d check%s failed\n", failures, failures == 1 ? "" : "s");
    return rig::cli::exit_failure;
  }
  std::printf("closed; every agent answered and every byte came back\n");
  return rig::cli::exit_ok;
}
