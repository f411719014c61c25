// Internal entry points of the agent side, for rigd.
#pragma once

#include <functional>
#include <string>

#include "rig/remote.hpp"

namespace rig::remote {

// An agent over a socket that is already listening (rigd's children inherit it), which serve
// takes over and closes when it returns.
Agent adopt_listener(const Key& key, int fd, int port, std::string where);

// Receives the lines an operator wants in a log as serve goes (rigd writes them to stderr, after
// the job's number): "started by the controller at ADDRESS, ...", and a shortage of descriptors or
// memory that holds up an accept; and `started`, once a controller has proven the key, so that
// serve has a job to end in order. Called on serve's thread; empty: none.
void set_agent_log(std::function<void(const std::string&)> log, std::function<void()> started = {});

// The listening socket of an agent that has not served yet.
int listener_fd(const Agent& agent);

}  // namespace rig::remote
