// The launcher's environment: RIG_REMOTE_AGENTS and RIG_REMOTE_KEY, parsed with every rule, for
// launched() and for the launchers that write them.
#pragma once

#include <string>
#include <vector>

#include "rig/remote.hpp"

namespace rig::remote {

struct LaunchedAgent {
  std::string name;
  std::string host;  // without brackets
  int port = 0;
};

// "NAME=ADDRESS:PORT,..." with an IPv6 ADDRESS in brackets; Error names the entry and the rule.
Result<std::vector<LaunchedAgent>> parse_agents(const std::string& text);

// 64 hexadecimal characters, whose bytes (not decoded) are the key.
Result<Key> parse_launcher_key(const std::string& text);

}  // namespace rig::remote
