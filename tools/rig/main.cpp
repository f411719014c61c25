// rig: the command-line tool. A thin dispatcher over the subcommands in commands.hpp.
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>

#include "commands.hpp"
#include "keygen.hpp"

namespace {

using rig::cli::Command;

// keygen takes the words after its name.
int keygen(std::span<char*> args) {
  return cmd_keygen(args.subspan(1));
}

constexpr Command commands[] = {
    {"check", "start a job on agents, make round trips to each, print what answered", cmd_check},
    {"keygen", "write a new random job key to a file (mode 0600)", keygen},
    {"pack", "build a rig.program from a C or C++ source, or list one's targets", cmd_pack},
    {"run", "start local agents and a controller program; report the job's outcome", cmd_run},
    {"status", "read each rigd's /status (--metrics) and print a line per agent", cmd_status},
};

void usage(std::FILE* out) {
  std::fputs(
      "usage: rig COMMAND [ARGS...]\n"
      "       rig help [COMMAND]\n"
      "\n"
      "commands:\n",
      out);
  for (const Command& c : commands) {
    std::fprintf(out, "  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.help.size()), c.help.data());
  }
  std::fputs("\n`rig COMMAND --help` describes one command.\n", out);
}

const Command* find(std::string_view name) {
  for (const Command& c : commands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const std::span<char*> args(argv, static_cast<std::size_t>(argc));
  if (args.size() < 2) {
    usage(stderr);
    return rig::cli::exit_usage;
  }
  const std::string_view name = args[1];
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && args.size() > 2) {
      // `rig help pack` is `rig pack --help`.
      const Command* c = find(args[2]);
      if (c == nullptr) {
        std::fprintf(stderr, "rig: no command '%s'\n", args[2]);
        usage(stderr);
        return rig::cli::exit_usage;
      }
      char help_flag[] = "--help";
      char* sub[] = {args[2], help_flag};
      return c->run(std::span<char*>(sub));
    }
    usage(stdout);
    return rig::cli::exit_ok;
  }
  const Command* c = find(name);
  if (c == nullptr) {
    std::fprintf(stderr, "rig: no command '%s'\n", args[1]);
    usage(stderr);
    return rig::cli::exit_usage;
  }
  return c->run(args.subspan(1));
}
