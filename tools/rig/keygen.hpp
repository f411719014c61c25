// `rig keygen FILE`: writes a new random job key.
#pragma once

#include <iosfwd>
#include <span>

namespace rig::tools {

// `args` are the words after "keygen". Writes usage or errors to `err` and, for --help, usage to
// `out`. Returns 0 on success, 2 on a usage error, 1 when the key cannot be written.
int keygen_main(std::span<char*> args, std::ostream& out, std::ostream& err);

}  // namespace rig::tools

// The CLI's entry for "keygen": keygen_main on std::cout and std::cerr.
int cmd_keygen(std::span<char*> args);
