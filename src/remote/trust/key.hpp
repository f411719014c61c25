// The library side of `rig keygen`: making a new key file. Reading one is rig::remote::read_key
// (rig/remote.hpp).
#pragma once

#include <string_view>

#include "rig/result.hpp"

namespace rig::remote {

// Creates the file at `path` (never an existing one, nor through a symbolic link), with mode 0600
// whatever the umask, holding keygen_bytes random bytes, flushed to disk before it returns. On an
// error after the file was created it removes the file, so no partial key is left behind. The Error
// names the file and the reason.
Result<Unit> write_new_key(std::string_view path);

}  // namespace rig::remote
