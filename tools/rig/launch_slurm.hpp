// rig run --slurm: how rig run starts one agent on each node of the Slurm allocation it runs in,
// through srun, and what a start that fails means. Like launch_ssh.hpp, for run.cpp's Launch: one
// srun per node (a job step of one task on that node), the key on its stdin, the agent's
// listening line and report on its stdout, the agent ended by the end of that stdin. Pure
// functions but for the questions asked of Slurm (scontrol, srun --help); no state.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "launch_ssh.hpp"

namespace rig::cli {

// A node of the allocation: its name (SLURM_JOB_NODELIST's), and the address Slurm reaches it at
// (its NodeAddr), resolved here, where the agent listens and the controller dials.
struct SlurmNode {
  std::string name;
  std::string address;
};

// The allocation's nodes, in SLURM_JOB_NODELIST's order. Failure: not inside an allocation
// (exit_usage), a list that does not parse, scontrol's own error (exit_srun), a NodeAddr that
// does not resolve (exit_unresolved).
std::variant<std::vector<SlurmNode>, LaunchFailure> slurm_nodes();

// Whether this srun has --overlap (Slurm 20.11 and later), without which a step inside an
// allocation whose steps hold every CPU waits for them.
bool srun_has_overlap();

// The srun command that starts a one-job rigd on `node`, listening on `address` port 0 and
// reporting on its stdout, with `rigd_args` after rigd's own: one task on that node
// (--nodes=1 --ntasks=1 --nodelist, so --ntasks-per-node=1), --kill-on-bad-exit, --overlap where
// srun has it. The key is no part of it: it goes on srun's stdin, which srun hands to the task.
std::vector<std::string> slurm_agent_argv(const SlurmNode& node, const std::string& rigd,
                                          const std::vector<std::string>& rigd_args, bool overlap);

// What a node's agent that printed no listening line tells, as ssh_start_failure says for a host;
// srun's own error text is passed on as it wrote it (escaped).
LaunchFailure slurm_start_failure(const std::string& node, const std::string& rigd, int wait_status,
                                  int waited_ms, std::string_view said, std::string_view errors);

}  // namespace rig::cli
