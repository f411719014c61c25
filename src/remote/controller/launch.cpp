// launched(): the job a launcher (rig run) set up through the environment.
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "core/signals.hpp"
#include "remote/controller/controller.hpp"
#include "remote/controller/launch.hpp"
#include "remote/io/address.hpp"
#include "remote/job/process.hpp"
#include "remote/job/report.hpp"

namespace rig::remote {
namespace {

// RIG_REMOTE_KEY holds 64 hexadecimal characters; their bytes are the key, as they are.
constexpr std::size_t launcher_key_chars = 64;

std::optional<std::string> take_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  std::string out = v;
  unsetenv(name);
  return out;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

Result<std::vector<LaunchedAgent>> parse_agents(const std::string& text) {
  std::vector<LaunchedAgent> out;
  if (text.empty()) return Error("RIG_REMOTE_AGENTS is empty");
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string entry =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto bad = [&](const std::string& why) {
      return Error("RIG_REMOTE_AGENTS: '" + entry + "': " + why);
    };
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) return bad("not NAME=ADDRESS:PORT");
    LaunchedAgent a;
    a.name = entry.substr(0, eq);
    auto address = parse_address(std::string_view(entry).substr(eq + 1));
    if (!address) return bad(address.error());
    a.host = std::move(address->host);
    a.port = address->port;
    for (const LaunchedAgent& other : out) {
      if (other.name == a.name) return bad("the name " + a.name + " is given twice");
    }
    out.push_back(std::move(a));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<Key> parse_launcher_key(const std::string& text) {
  if (text.size() != launcher_key_chars) {
    return Error("RIG_REMOTE_KEY has " + std::to_string(text.size()) + " characters, not " +
                 std::to_string(launcher_key_chars) + " hexadecimal ones");
  }
  for (char c : text) {
    if (!is_hex(c)) return Error("RIG_REMOTE_KEY has a character that is not hexadecimal");
  }
  return key(text);
}

std::optional<Result<Job>> launched() {
  const rig::detail::SignalsBlocked blocked;  // it takes locks: a handler runs only in its waits
  static std::mutex mu;
  static bool called = false;
  auto report = take_report_descriptor();
  if (!report) return std::nullopt;
  // All three variables leave the environment whatever follows, the key above all: a program the
  // process runs later must not inherit it.
  const auto agents_text = take_env("RIG_REMOTE_AGENTS");
  const auto key_text = take_env("RIG_REMOTE_KEY");
  if (!*report) return Result<Job>(Error(report->error()));
  const int fd = **report;
  const pid_t me = getpid();
  const auto refuse = [&](const std::string& why) {
    write_report_line(fd, me, "failed " + why);
    return Result<Job>(Error(why));
  };
  if (!agents_text) return refuse("RIG_REMOTE_AGENTS is not set");
  if (!key_text) return refuse("RIG_REMOTE_KEY is not set");
  auto agents = parse_agents(*agents_text);
  if (!agents) return refuse(agents.error());
  auto job_key = parse_launcher_key(*key_text);
  if (!job_key) return refuse(job_key.error());
  std::vector<Member> members;
  for (const LaunchedAgent& a : *agents) {
    Member m;
    m.name = a.name;
    m.dial_text = address_text(a.host, a.port);
    auto addr = resolve(a.host, a.port);
    if (!addr) return refuse(a.name + ": " + addr.error());
    m.address = *addr;
    members.push_back(std::move(m));
  }
  {
    std::lock_guard lock(mu);
    if (called) throw std::invalid_argument("rig: launched() was called before in this process");
    called = true;
  }
  return connect_named(*job_key, std::move(members), job_timing(), fd);
}

}  // namespace rig::remote
