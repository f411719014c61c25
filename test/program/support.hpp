// Helpers the program tests share: the files the build made for them, byte-level edits of a
// rig.program, and running the rig CLI as a user would.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "child/child.hpp"
#include "program/file.hpp"
#include "program/format.hpp"
#include "rig/program.hpp"

namespace rig::test {

// A path the build passes in the environment (test/program/meson.build).
inline std::string env_path(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    throw std::runtime_error(std::string(name) + " is not set (run through meson test)");
  }
  return v;
}

inline std::vector<std::byte> read_bytes(const std::string& path) {
  auto r = program::read_file(path, program::file_bytes_max);
  if (!r) throw std::runtime_error(r.error());
  return std::move(*r);
}

inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  program::UniqueFd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (f.get() < 0) throw std::runtime_error("cannot create " + path);
  if (::write(f.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    throw std::runtime_error("cannot write " + path);
  }
}

inline std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
  return b;
}

inline std::string text_of(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline std::uint32_t get_u32(const std::vector<std::byte>& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(b.at(at + i));
  return v;
}

inline std::uint64_t get_u64(const std::vector<std::byte>& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(b.at(at + i));
  return v;
}

inline void put_u32(std::vector<std::byte>& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<std::byte>(v >> (8 * i));
}

inline void put_u64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.at(at + i) = static_cast<std::byte>(v >> (8 * i));
}

// Rewrites the checksum field so that it matches the bytes again: an edit made this way reaches
// the record checks instead of stopping at the checksum.
inline void reseal(std::vector<std::byte>& b) {
  unsigned char sum[program::checksum_bytes];
  program::checksum(b, sum);
  for (std::size_t i = 0; i < program::checksum_bytes; ++i) {
    b[program::checksum_offset + i] = static_cast<std::byte>(sum[i]);
  }
}

// The error text of parsing `bytes`, or "ok" if it parses.
inline std::string parse_error(std::vector<std::byte> bytes) {
  auto r = Program::parse(std::move(bytes));
  return r ? std::string("ok") : r.error();
}

// A directory of the test's own, removed with its contents at the end. Owner and thread: the test
// case that made it. Lifetime: the test case's scope.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string t =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rig-program-test-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // The names of what is in the directory now.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::string path_;
};

// How a child process ended and what it printed.
struct Outcome {
  int wait_status = 0;
  std::string out;
  std::string err;

  bool exited() const { return WIFEXITED(wait_status); }
  int code() const { return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1; }
  int signal() const { return WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0; }
};

// Starts `argv` with this process's environment plus `env_set` ("NAME=value"; a bare "NAME"
// removes NAME), its stdout and stderr to files in `scratch`. Returns the pid.
inline pid_t start(const std::vector<std::string>& argv, const std::vector<std::string>& env_set,
                   const ScratchDir& scratch) {
  const std::string out = scratch / "stdout", err = scratch / "stderr";
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("cannot open " + out + " or " + err);
  rig::child::Spec spec;
  spec.argv = argv;
  spec.env = env_set;
  spec.stdout_fd = out_fd;
  spec.stderr_fd = err_fd;
  const auto pid = rig::child::spawn(spec);
  ::close(out_fd);
  ::close(err_fd);
  if (!pid) throw std::runtime_error("cannot start " + argv[0] + ": " + pid.error());
  return *pid;
}

inline Outcome finish(pid_t pid, const ScratchDir& scratch) {
  Outcome o;
  while (::waitpid(pid, &o.wait_status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  o.out = text_of(read_bytes(scratch / "stdout"));
  o.err = text_of(read_bytes(scratch / "stderr"));
  return o;
}

inline Outcome run(const std::vector<std::string>& argv, const std::vector<std::string>& env_set,
                   const ScratchDir& scratch) {
  return finish(start(argv, env_set, scratch), scratch);
}

}  // namespace rig::test
