// rig run --ssh: how rig run starts one agent on a host through ssh, and what a start that fails
// means. The processes themselves are run.cpp's (Launch); this unit knows ssh: its configuration,
// its command line, its exit statuses. Pure functions but for ssh_address's `ssh -G` and name
// look-up; no state.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rig/result.hpp"

namespace rig::cli {

// The longest ssh may take to connect to a host: half of the 10 s a host has to report its
// address (agent_start_timeout_ms), leaving the rest for the login and rigd's start, so that an
// unreachable host is reported as ssh saw it rather than as a silence.
inline constexpr int ssh_connect_timeout_s = 5;

// Why a host's agent could not be started, and the exit status that says which kind of cause.
struct LaunchFailure {
  std::string message;  // names the host; text from elsewhere escaped
  int exit_status;
};

// The address `host`'s agent listens on and the controller dials: the name ssh's configuration
// gives the host (`ssh -G`: HostName, Match), resolved here, as a numeric address. The agent binds
// exactly that address on the host, so the listening line it prints is one the controller can
// reach (a loopback one only for a loopback host). A failure: "HOST: ..." with exit_unresolved
// for a name that does not resolve (never a fallback to another address), else exit_unreachable
// (ssh could not read its configuration).
std::variant<std::string, LaunchFailure> ssh_address(const std::string& host);

// The ssh command that starts a one-job rigd on `host`, listening on `address` port 0 and
// reporting its job's end on its stdout after its listening line, with `rigd_args` after rigd's
// own. ssh runs non-interactively (BatchMode: no password prompt, no host key question), with
// ssh_connect_timeout_s; everything else is the user's ssh configuration. The key is no part of
// it: it goes on ssh's stdin (rigd --key - --watch-stdin), which rig run keeps open for as long as
// the agent is wanted.
std::vector<std::string> ssh_agent_argv(const std::string& host, const std::string& address,
                                        const std::string& rigd,
                                        const std::vector<std::string>& rigd_args);

// What a host's agent that printed no listening line tells: `wait_status` is ssh's end, or -1 if
// it was still running `waited_ms` after its start; `said` what it printed on its stdout (a line
// that is not a listening line), `errors` what it wrote on its stderr.
LaunchFailure ssh_start_failure(const std::string& host, const std::string& rigd, int wait_status,
                                int waited_ms, std::string_view said, std::string_view errors);

// `name` resolved here, as a numeric address: the first the system gives, the one ssh would dial.
// Error: the system's reason.
Result<std::string> resolve_address(const std::string& name);

// The last line of `text` that is not empty, escaped; or `otherwise`: the line of an engine's
// stderr that says why (ssh's, srun's).
std::string last_line(std::string_view text, std::string_view otherwise);

// A host name rig run takes: not empty, no byte that is not printable, no space, not starting
// with '-' (ssh would read it as an option). Error says why, with the name escaped.
Result<Unit> check_host_name(std::string_view host);

}  // namespace rig::cli
