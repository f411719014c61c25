#include "files.hpp"

#include "program/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rig::cli {
namespace {

std::string why() {
  return std::strerror(errno);
}

}  // namespace

Result<Unit> write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string temp = (slash == std::string::npos ? "" : dir) + "." + base + ".tmp-XXXXXX";
  program::UniqueFd f(::mkostemp(temp.data(), O_CLOEXEC));
  if (f.get() < 0) return Error(path + ": cannot make a temporary file in " + dir + ": " + why());

  auto fail = [&](const std::string& what) {
    const std::string reason = why();
    ::unlink(temp.c_str());
    return Error(path + ": " + what + ": " + reason);
  };
  // mkostemp makes the file 0600; give it the mode a plain creat would. Reading the umask means
  // setting it for a moment, which is safe here: the CLI runs one thread.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(f.get(), 0666 & ~mask) != 0) return fail("cannot set the mode of " + temp);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(f.get(), bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return fail("writing " + temp + " failed");
    done += static_cast<std::size_t>(w);
  }
  // Flushed before the rename, so that a crash cannot leave the new name on an empty file.
  if (::fsync(f.get()) != 0) return fail("flushing " + temp + " failed");
  if (::close(f.release()) != 0) return fail("closing " + temp + " failed");
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail("cannot rename " + temp + " to it");
  return Unit{};
}

}  // namespace rig::cli
