// The rig CLI's subcommands. Each is a function over its own argv: args[0] is the subcommand's
// name ("pack") and the rest are its arguments, exactly as the user typed them. A subcommand
// prints its own errors and returns the process's exit status.
//
// To add one: declare its function below, define it in its own file in tools/rig/, add that file
// to tools/meson.build and add a row to the table in main.cpp.
#pragma once

#include <span>
#include <string_view>

namespace rig::cli {

// Exit statuses every subcommand uses (rigd uses the same, plus 3 for fail-stop).
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;  // the command was understood but did not succeed
inline constexpr int exit_usage = 2;    // the command line was wrong; nothing was done
// rig run's launchers (--ssh, --slurm): why a job could not start, one status per kind of cause.
inline constexpr int exit_unresolved = 10;    // a host's name does not resolve
inline constexpr int exit_unreachable = 11;   // ssh could not reach a host or log in to it
inline constexpr int exit_no_rigd = 12;       // rigd is missing or not executable on a host
inline constexpr int exit_agent_silent = 13;  // an agent did not report its address in time
inline constexpr int exit_srun = 14;          // srun (or scontrol) refused, in its own words

using CommandFn = int (*)(std::span<char*> args);

struct Command {
  std::string_view name;
  std::string_view help;  // one line, for `rig help`
  CommandFn run;
};

}  // namespace rig::cli

// rig pack: builds a rig.program from a source file, or lists one's targets (pack.cpp).
int cmd_pack(std::span<char*> args);

// rig run: starts local agents and a controller program, and reports the job's outcome (run.cpp).
int cmd_run(std::span<char*> args);

// rig check: starts a job on given agents, makes round trips to each, prints what it found
// (check.cpp).
int cmd_check(std::span<char*> args);

// rig status: reads each rigd's /status (its --metrics endpoint) and prints a line per agent
// (status.cpp).
int cmd_status(std::span<char*> args);
