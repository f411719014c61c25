// rig check --key FILE HOST:PORT...
//
// The operator's first tool: starts a job on those agents, makes round trips to each machine's
// host, prints each host's name, arch, memory and round-trip times, and closes the job. Exits 0 if
// every agent answered and the job closed, 1 otherwise (with the root cause), 2 on usage errors.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"

namespace {

// Round trips per host: enough for a stable median, few enough to finish in well under a second.
constexpr int check_rounds = 200;

const char* const check_usage =
    "usage: rig check --key FILE HOST:PORT...\n"
    "  Starts a job on those agents, makes round trips to each machine's host, prints what it\n"
    "  found and closes the job.\n";

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
      std::string host;
      std::string port;
      if (!a.empty() && a.front() == '[') {
        const auto close = a.find("]:");
        if (close == std::string::npos) return usage("'" + a + "' is not [HOST]:PORT");
        host = a.substr(1, close - 1);
        port = a.substr(close + 2);
      } else {
        const auto colon = a.rfind(':');
        if (colon == std::string::npos) return usage("'" + a + "' is not HOST:PORT");
        host = a.substr(0, colon);
        port = a.substr(colon + 1);
      }
      char* end = nullptr;
      const long p = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
        return usage("bad port in '" + a + "'");
      }
      agents.emplace_back(host, static_cast<int>(p));
    }
  }
  if (key_file.empty()) return usage("--key FILE is required");
  if (agents.empty()) return usage("name at least one agent as HOST:PORT");
  auto key = rig::remote::read_key(key_file);
  if (!key) {
    std::fprintf(stderr, "rig check: %s\n", key.error().c_str());
    return rig::cli::exit_usage;
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
  try {
    for (const rig::Device& host : (**job).hosts()) {
      std::vector<double> us;
      for (int i = 0; i < check_rounds; ++i) {
        const auto s = std::chrono::steady_clock::now();
        host.wait(rig::submit(host, std::span<const rig::Part>{}));
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s)
                         .count());
      }
      std::sort(us.begin(), us.end());
      std::printf("%-28s arch %-10s memory %7llu MiB  round trip median %.1f us, max %.1f us\n",
                  host.name().c_str(), host.arch().c_str(),
                  static_cast<unsigned long long>(host.budget() >> 20), us[us.size() / 2],
                  us.back());
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
  std::printf("closed; every agent answered\n");
  return rig::cli::exit_ok;
}
