// Internal entry points of the agent side, for rigd.
#pragma once

#include "rig/remote.hpp"

namespace rig::remote {

// An agent over a socket that is already listening (rigd's children inherit it), which serve
// takes over and closes when it returns.
Agent adopt_listener(const Key& key, int fd, int port, std::string where);

// The listening socket of an agent that has not served yet.
int listener_fd(const Agent& agent);

}  // namespace rig::remote
