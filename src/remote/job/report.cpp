#include "remote/job/report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace rig::remote {

std::optional<Result<int>> take_report_descriptor() {
  const char* env = std::getenv("RIG_REMOTE_REPORT");
  if (env == nullptr) return std::nullopt;
  const std::string text = env;
  unsetenv("RIG_REMOTE_REPORT");
  char* end = nullptr;
  errno = 0;
  const long fd = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || fd < 0 || fd > 1'000'000) {
    return Result<int>(Error("RIG_REMOTE_REPORT='" + text + "' is not a descriptor number"));
  }
  const int flags = fcntl(static_cast<int>(fd), F_GETFD);
  if (flags < 0) {
    return Result<int>(Error("RIG_REMOTE_REPORT=" + text + " names no open descriptor"));
  }
  fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC);
  return Result<int>(static_cast<int>(fd));
}

void write_report_line(int fd, pid_t owner, std::string line) {
  if (fd < 0 || owner != getpid()) return;
  std::replace(line.begin(), line.end(), '\n', ' ');
  line.push_back('\n');
  // One write: a launcher reading several processes' reports sees whole lines.
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace rig::remote
