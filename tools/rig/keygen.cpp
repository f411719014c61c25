#include "keygen.hpp"

#include <iostream>
#include <string_view>

#include "remote/limits.hpp"
#include "remote/trust/key.hpp"

namespace rig::tools {

namespace {

void usage(std::ostream& os) {
  os << "usage: rig keygen FILE\n"
        "Writes a new random "
     << remote::keygen_bytes
     << "-byte job key to FILE, readable by this user only (mode 0600).\n"
        "FILE must not exist: a key is never overwritten. Name a FILE that starts with '-' as "
        "./-FILE.\n";
}

}  // namespace

int keygen_main(std::span<char*> args, std::ostream& out, std::ostream& err) {
  if (args.size() == 1) {
    const std::string_view arg = args[0];
    if (arg == "-h" || arg == "--help") {
      usage(out);
      return 0;
    }
    if (!arg.starts_with('-')) {
      const auto written = remote::write_new_key(arg);
      if (written) return 0;
      err << "rig keygen: " << written.error() << "\n";
      return 1;
    }
  }
  usage(err);
  return 2;
}

}  // namespace rig::tools

int cmd_keygen(std::span<char*> args) {
  return rig::tools::keygen_main(args, std::cout, std::cerr);
}
