#include "launch_slurm.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <map>

#include "commands.hpp"
#include "hostlist.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"
#include "remote/wire/printable.hpp"

namespace rig::cli {

namespace {

// How long scontrol and srun --help may take: they ask the controller, or nothing.
constexpr int slurm_query_timeout_ms = 10'000;
// The last line of `text` that holds `word`, escaped; empty if none does.
std::string line_with(std::string_view text, std::string_view word) {
  std::string found;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, nl - at);
    if (line.find(word) != std::string_view::npos) found = remote::printable(line);
    at = nl + 1;
  }
  return found;
}

// The value of `key`= in scontrol's one-line record `line`, or nothing.
std::string field(std::string_view line, std::string_view key) {
  const std::string look = " " + std::string(key) + "=";
  const std::size_t at = (" " + std::string(line)).find(look);
  if (at == std::string::npos) return {};
  const std::size_t from = at + look.size() - 1;
  const std::size_t end = std::min(line.find(' ', from), line.size());
  return std::string(line.substr(from, end - from));
}

}  // namespace

std::variant<std::vector<SlurmNode>, LaunchFailure> slurm_nodes() {
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (list == nullptr || *list == '\0') {
    return LaunchFailure{
        "not inside a Slurm allocation: SLURM_JOB_NODELIST is not set (run "
        "rig run --slurm under salloc or sbatch)",
        exit_usage};
  }
  auto names = expand_hostlist(list);
  if (!names) return LaunchFailure{"SLURM_JOB_NODELIST: " + names.error(), exit_srun};
  // One question for every node: the address Slurm itself reaches it at.
  const Captured c =
      capture({"scontrol", "--oneliner", "show", "node", list}, slurm_query_timeout_ms);
  if (!c.wait_status || !WIFEXITED(*c.wait_status) || WEXITSTATUS(*c.wait_status) != 0) {
    return LaunchFailure{"scontrol show node " + remote::printable(list) + ": " +
                             (c.wait_status ? last_line(c.text, "(it said nothing)") : c.error),
                         exit_srun};
  }
  std::map<std::string, std::string> addresses;
  for (std::size_t at = 0; at < c.text.size();) {
    const std::size_t nl = std::min(c.text.find('\n', at), c.text.size());
    const std::string_view line = std::string_view(c.text).substr(at, nl - at);
    if (const std::string name = field(line, "NodeName"); !name.empty()) {
      addresses[name] = field(line, "NodeAddr");
    }
    at = nl + 1;
  }
  std::vector<SlurmNode> nodes;
  for (const std::string& name : *names) {
    std::string addr = addresses.count(name) ? addresses[name] : "";
    if (addr.empty()) addr = name;  // scontrol gave none: the name is the address, as for Slurm
    const std::string given = addr == name ? "" : " (its NodeAddr " + remote::printable(addr) + ")";
    auto address = resolve_address(addr);
    if (!address) {
      return LaunchFailure{name + given + ": the name does not resolve: " + address.error(),
                           exit_unresolved};
    }
    nodes.push_back({name, *address});
  }
  return nodes;
}

bool srun_has_overlap() {
  const Captured c = capture({"srun", "--help"}, slurm_query_timeout_ms);
  return c.text.find("--overlap") != std::string::npos;
}

std::vector<std::string> slurm_agent_argv(const SlurmNode& node, const std::string& rigd,
                                          const std::vector<std::string>& rigd_args, bool overlap) {
  std::vector<std::string> argv = {"srun",
                                   "--nodes=1",
                                   "--ntasks=1",
                                   "--ntasks-per-node=1",
                                   "--nodelist=" + node.name,
                                   "--kill-on-bad-exit=1",
                                   "--quiet"};
  if (overlap) argv.push_back("--overlap");
  // No shell: srun runs the program itself; env sets the report on its stdout.
  argv.insert(argv.end(), {"env", "RIG_REMOTE_REPORT=1", rigd, "--key", "-", "--watch-stdin",
                           "--once", "--listen", remote::address_text(node.address, 0)});
  argv.insert(argv.end(), rigd_args.begin(), rigd_args.end());
  return argv;
}

LaunchFailure slurm_start_failure(const std::string& node, const std::string& rigd, int wait_status,
                                  int waited_ms, std::string_view said, std::string_view errors) {
  const std::string quoted = "'" + remote::printable_once(rigd) + "'";
  if (!said.empty()) {
    return {node + ": rigd said '" + remote::printable(said) + "', not its listening line",
            exit_agent_silent};
  }
  const std::string why = last_line(errors, "nothing on its stderr");
  if (wait_status < 0) {
    const std::string last = last_line(errors, "");
    return {node + ": no address within " + std::to_string(waited_ms / 1000) + " s" +
                (last.empty() ? "" : " (the last line on its stderr: " + last + ")"),
            exit_agent_silent};
  }
  // env runs on the node: its words say that rigd is missing or cannot run there.
  const std::string env_line = line_with(errors, "env: ");
  if (!env_line.empty() && env_line.find("No such file or directory") != std::string::npos) {
    return {node + ": rigd " + quoted + " is not there: " + env_line, exit_no_rigd};
  }
  if (!env_line.empty() && env_line.find("Permission denied") != std::string::npos) {
    return {node + ": rigd " + quoted + " cannot be run: " + env_line, exit_no_rigd};
  }
  // rigd's own last word, where it ran; else srun's.
  if (const std::string rigd_line = line_with(errors, "rigd["); !rigd_line.empty()) {
    return {node + ": rigd " + wait_status_text(wait_status) +
                " before reporting its address: " + rigd_line,
            exit_agent_silent};
  }
  return {node + ": srun " + wait_status_text(wait_status) + ": " + why, exit_srun};
}

}  // namespace rig::cli
