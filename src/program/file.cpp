#include "program/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rig::program {
namespace {

std::string why() {
  return std::strerror(errno);
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::vector<std::byte>> read_file(const std::string& path, std::uint64_t bytes_max) {
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.get() < 0) return Error(path + ": cannot open: " + why());
  struct stat st;
  if (::fstat(f.get(), &st) != 0) return Error(path + ": cannot stat: " + why());
  if (!S_ISREG(st.st_mode)) return Error(path + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > bytes_max) {
    return Error(path + ": " + std::to_string(size) + " bytes, more than the " +
                 std::to_string(bytes_max) + " allowed");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(f.get(), bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Error(path + ": read failed: " + why());
    if (r == 0) return Error(path + ": the file shrank while it was read");
    got += static_cast<std::size_t>(r);
  }
  return bytes;
}

}  // namespace rig::program
