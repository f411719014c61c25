// Files for Program::read, the host loader and the CLI: a descriptor that closes itself, and a
// bounded whole-file read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rig/result.hpp"

namespace rig::program {

// Owner: the scope that opened the descriptor. Thread: that scope's. Lifetime: closes the
// descriptor, if any, when it goes; release() hands it on.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// The bytes of the regular file `path`, refused unread if it holds more than `bytes_max`; Error
// names the file and the reason.
Result<std::vector<std::byte>> read_file(const std::string& path, std::uint64_t bytes_max);

}  // namespace rig::program
