// Atomic file writes for the CLI (reads are program::read_file, shared with the library).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "rig/result.hpp"

namespace rig::cli {

// Writes `bytes` to `path` so that readers see the old file or the whole new one, never part: a
// temporary file beside it is written, flushed to disk and renamed over it. The new file's mode
// is 0666 less the umask, as for any new file. Error names the file and the reason; the
// temporary file is gone on every path.
Result<Unit> write_file_atomically(const std::string& path, std::span<const std::byte> bytes);

}  // namespace rig::cli
