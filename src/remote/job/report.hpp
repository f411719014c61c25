// The launcher's report descriptor (RIG_REMOTE_REPORT): taking it from the environment and writing
// its lines.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "rig/result.hpp"

namespace rig::remote {

// Takes RIG_REMOTE_REPORT out of the environment: nothing if it is not set, the descriptor (now
// close-on-exec) if it names an open one, an Error otherwise.
std::optional<Result<int>> take_report_descriptor();

// Writes `line` and a newline in one write, newlines inside it as spaces; nothing if `fd` is -1 or
// this process is not `owner` (a child of fork writes nothing).
void write_report_line(int fd, pid_t owner, std::string line);

}  // namespace rig::remote
