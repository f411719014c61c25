// Internal entry points of the agent side, for rigd.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rig/remote.hpp"

namespace rig::remote {

// An agent over a socket that is already listening (rigd's children inherit it), which serve
// takes over and closes when it returns.
Agent adopt_listener(const Key& key, int fd, int port, std::string where);

// What serve tells its caller as a job goes, for an operator (rigd's log and metrics). Each is
// called on serve's thread and may be empty.
struct AgentEvents {
  // A line for the log (rigd writes it to stderr, after the job's number): "started by the
  // controller at ADDRESS, ...", and a shortage of descriptors or memory that holds up an accept.
  std::function<void(const std::string& line)> log;
  // A controller, at `controller_address` (HOST:PORT), has proven the key: serve now has a job to
  // end in order.
  std::function<void(const std::string& controller_address)> started;
  // The controller named the job's agents (JOIN): every name as it gave it (printable), this
  // agent's among them.
  std::function<void(const std::vector<std::string>& agents)> joined;
};
void set_agent_events(AgentEvents events);

// The listening socket of an agent that has not served yet.
int listener_fd(const Agent& agent);

}  // namespace rig::remote
