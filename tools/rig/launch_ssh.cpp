#include "launch_ssh.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include "commands.hpp"
#include "process.hpp"
#include "remote/io/address.hpp"
#include "remote/wire/printable.hpp"

namespace rig::cli {

namespace {

// How long `ssh -G` may take to print a host's configuration: it reads files and connects to
// nothing, but a Match exec in the configuration runs a command.
constexpr int ssh_config_timeout_ms = 10'000;
// ssh's exit status for its own failures (connect, host key, login); any other is the command's.
constexpr int ssh_failed_status = 255;
// A POSIX shell's (and env's) statuses for a command it cannot find, and for one it cannot run.
constexpr int command_missing_status = 127;
constexpr int command_not_runnable_status = 126;

// `text` as one word of a POSIX shell command line, for the host's shell that runs ssh's command.
std::string shell_word(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

Result<std::string> resolve_address(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(name.c_str(), nullptr, &hints, &found); e != 0) {
    return Error(gai_strerror(e));
  }
  char numeric[NI_MAXHOST];
  const int e = getnameinfo(found->ai_addr, found->ai_addrlen, numeric, sizeof numeric, nullptr, 0,
                            NI_NUMERICHOST);
  freeaddrinfo(found);
  if (e != 0) return Error(gai_strerror(e));
  return std::string(numeric);
}

std::string last_line(std::string_view text, std::string_view otherwise) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const std::size_t nl = text.rfind('\n');
  const std::string_view line = nl == std::string_view::npos ? text : text.substr(nl + 1);
  return line.empty() ? std::string(otherwise) : remote::printable(line);
}

Result<Unit> check_host_name(std::string_view host) {
  if (host.empty()) return Error("an empty host name");
  for (char c : host) {
    if (c <= ' ' || c >= 0x7f || c == '=' || c == ',') {
      return Error("host '" + remote::printable(host) +
                   "': a name with a space, '=', ',' or a byte that is not printable");
    }
  }
  if (host.front() == '-') return Error("host '" + std::string(host) + "' starts with '-'");
  return Unit{};
}

std::variant<std::string, LaunchFailure> ssh_address(const std::string& host) {
  const auto unreachable = [&](const std::string& why) {
    return LaunchFailure{host + ": ssh cannot read its configuration for it: " + why,
                         exit_unreachable};
  };
  const Captured c =
      capture({"ssh", "-G", "-o", "BatchMode=yes", "--", host}, ssh_config_timeout_ms);
  if (!c.wait_status) return unreachable(c.error);
  // "hostname NAME" is the line looked for.
  std::string name;
  for (std::size_t at = 0; at < c.text.size();) {
    const std::size_t nl = std::min(c.text.find('\n', at), c.text.size());
    const std::string_view line = std::string_view(c.text).substr(at, nl - at);
    if (line.starts_with("hostname ")) name = line.substr(std::strlen("hostname "));
    at = nl + 1;
  }
  if (!WIFEXITED(*c.wait_status) || WEXITSTATUS(*c.wait_status) != 0 || name.empty()) {
    return unreachable("ssh -G " + wait_status_text(*c.wait_status) + ": " +
                       last_line(c.text, "(it said nothing)"));
  }
  const std::string given = name == host ? "" : " (ssh's HostName " + remote::printable(name) + ")";
  auto address = resolve_address(name);
  if (!address) {
    return LaunchFailure{host + given + ": the name does not resolve: " + address.error(),
                         exit_unresolved};
  }
  return *address;
}

std::vector<std::string> ssh_agent_argv(const std::string& host, const std::string& address,
                                        const std::string& rigd,
                                        const std::vector<std::string>& rigd_args) {
  // The host's shell runs the command: each word quoted, and exec, so that the agent is the
  // session's process. env sets the report on the agent's stdout, where rig run reads it after
  // the listening line; env's 127 and 126 say that rigd is missing or cannot be run.
  std::string command = "exec env RIG_REMOTE_REPORT=1 " + shell_word(rigd) +
                        " --key - --watch-stdin --once --listen " +
                        shell_word(remote::address_text(address, 0));
  for (const std::string& arg : rigd_args) command += " " + shell_word(arg);
  return {"ssh",  "-T",
          "-o",   "BatchMode=yes",
          "-o",   "ConnectTimeout=" + std::to_string(ssh_connect_timeout_s),
          "--",   host,
          command};
}

LaunchFailure ssh_start_failure(const std::string& host, const std::string& rigd, int wait_status,
                                int waited_ms, std::string_view said, std::string_view errors) {
  const std::string quoted = "'" + remote::printable_once(rigd) + "'";
  if (!said.empty()) {
    return {host + ": rigd said '" + remote::printable(said) + "', not its listening line",
            exit_agent_silent};
  }
  if (wait_status < 0) {
    const std::string last = last_line(errors, "");
    return {host + ": no address within " + std::to_string(waited_ms / 1000) + " s" +
                (last.empty() ? "" : " (the last line on its stderr: " + last + ")"),
            exit_agent_silent};
  }
  const std::string why = last_line(errors, "nothing on its stderr");
  if (WIFEXITED(wait_status)) {
    switch (WEXITSTATUS(wait_status)) {
      case ssh_failed_status:
        return {host + ": ssh could not reach it or log in: " + why, exit_unreachable};
      case command_missing_status:
        return {host + ": rigd " + quoted + " is not there: " + why, exit_no_rigd};
      case command_not_runnable_status:
        return {host + ": rigd " + quoted + " cannot be run: " + why, exit_no_rigd};
      default:
        break;
    }
  }
  return {
      host + ": rigd " + wait_status_text(wait_status) + " before reporting its address: " + why,
      exit_agent_silent};
}

}  // namespace rig::cli
