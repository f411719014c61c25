// rig status [--json] HOST:PORT...
//
// Each HOST:PORT is where a rigd's --metrics listens. Reads each agent's /status (all at once,
// each within status_timeout_ms) and prints one line per agent, in the order given: its address,
// idle or serving job N for CONTROLLER since T (with the memory the job holds there), its kinds,
// its devices (and how many the job holds), its jobs so far, and the last job's outcome and root
// cause. An agent that cannot be read is a line saying why, and the exit status is 1. With
// --json, one JSON array instead, an object per agent: {"agent": HOST:PORT, "status": {...}} as
// rigd wrote it, or {"agent": ..., "error": WHY}. What an agent sends is printed escaped.
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "http_get.hpp"
#include "remote/io/address.hpp"
#include "remote/wire/printable.hpp"

namespace {

// A rigd answers /status in milliseconds; this is for a machine that is slow or far away, and
// bounds how long an agent that does not answer holds up the report of the others.
constexpr int status_timeout_ms = 5'000;

constexpr const char* usage_text = "usage: rig status [--json] HOST:PORT...";

struct Answer {
  std::string agent;  // as the user wrote it
  std::optional<nlohmann::json> status;
  std::string error;
};

Answer ask(const std::string& agent) {
  Answer a{agent, std::nullopt, {}};
  auto at = rig::remote::parse_address(agent);
  if (!at) {
    a.error = "not HOST:PORT: " + at.error();
    return a;
  }
  auto reply = rig::cli::http_get(at->host, at->port, "/status", status_timeout_ms);
  if (!reply) {
    a.error = "unreachable: " + reply.error();
    return a;
  }
  if (reply->status != 200) {
    a.error = "answered HTTP " + std::to_string(reply->status) + ", not a rigd's /status";
    return a;
  }
  auto j = nlohmann::json::parse(reply->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    a.error = "answered something other than a JSON object: not a rigd's /status";
    return a;
  }
  a.status = std::move(j);
  return a;
}

// A field of the agent's JSON as text, escaped; `fallback` if it is missing or not a string.
std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "?") {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return fallback;
  return rig::remote::printable(it->get<std::string>());
}

// A field as a number; -1 if missing or not a whole number.
long long number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return -1;
  return it->get<long long>();
}

std::string line_of(const Answer& a) {
  const nlohmann::json& s = *a.status;
  std::string line = a.agent + "  ";
  const auto job = s.find("job");
  if (text(s, "state") == "serving" && job != s.end() && job->is_object()) {
    line += "serving job " + std::to_string(number(*job, "number")) + " for " +
            text(*job, "controller") + " since " + text(*job, "since");
    if (number(*job, "memory_bytes") >= 0) {
      line += "  memory " + std::to_string(number(*job, "memory_bytes")) + " B";
    }
  } else {
    line += "idle";
  }
  line += "  kinds " + text(s, "kinds") + "  arch " + text(s, "arch");
  // The machine's devices as its daemon found them, and how many the job being served holds.
  const auto devices = s.find("devices");
  if (devices != s.end() && devices->is_array()) {
    std::string names;
    long long in_use = 0;
    for (const auto& d : *devices) {
      if (!d.is_object()) continue;
      names += (names.empty() ? "" : ",") + text(d, "name");
      const auto u = d.find("in_use");
      if (u != d.end() && u->is_boolean() && u->get<bool>()) ++in_use;
    }
    line += "  devices " + (names.empty() ? std::string("none") : names);
    if (text(s, "state") == "serving") line += " (" + std::to_string(in_use) + " in use)";
  } else {
    line += "  devices unknown yet";
  }
  const auto jobs = s.find("jobs");
  if (jobs != s.end() && jobs->is_object()) {
    line += "  jobs " + std::to_string(number(*jobs, "started")) + " (" +
            std::to_string(number(*jobs, "closed")) + " closed, " +
            std::to_string(number(*jobs, "failed")) + " failed)";
  }
  const auto last = s.find("last");
  if (last == s.end() || !last->is_object()) {
    line += "  last: none";
  } else if (text(*last, "outcome") == "closed") {
    line += "  last: job " + std::to_string(number(*last, "job")) + " closed";
  } else {
    line += "  last: job " + std::to_string(number(*last, "job")) + " failed (" +
            text(*last, "cause_kind") + "): " + text(*last, "cause");
  }
  return line;
}

}  // namespace

int cmd_status(std::span<char*> args) {
  bool json = false;
  std::vector<std::string> agents;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("%s\n", usage_text);
      return rig::cli::exit_ok;
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "rig status: unknown option '%s'\n%s\n",
                   rig::remote::printable(arg).c_str(), usage_text);
      return rig::cli::exit_usage;
    } else {
      if (auto at = rig::remote::parse_address(arg); !at) {
        std::fprintf(stderr, "rig status: '%s' is not HOST:PORT: %s\n%s\n",
                     rig::remote::printable(arg).c_str(), at.error().c_str(), usage_text);
        return rig::cli::exit_usage;
      }
      agents.push_back(arg);
    }
  }
  if (agents.empty()) {
    std::fprintf(stderr, "rig status: name at least one agent's --metrics HOST:PORT\n%s\n",
                 usage_text);
    return rig::cli::exit_usage;
  }
  // All at once: an agent that does not answer costs the report its bound once, not once each.
  std::vector<std::future<Answer>> asked;
  for (const auto& agent : agents) asked.push_back(std::async(std::launch::async, ask, agent));
  std::vector<Answer> answers;
  for (auto& f : asked) answers.push_back(f.get());

  int status = rig::cli::exit_ok;
  nlohmann::json out = nlohmann::json::array();
  for (const Answer& a : answers) {
    if (!a.status) status = rig::cli::exit_failure;
    if (json) {
      out.push_back(a.status ? nlohmann::json{{"agent", a.agent}, {"status", *a.status}}
                             : nlohmann::json{{"agent", a.agent}, {"error", a.error}});
    } else {
      const std::string line = a.status ? line_of(a) : a.agent + "  " + a.error;
      std::printf("%s\n", line.c_str());
    }
  }
  if (json) {
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  return status;
}
