// The library side of `rig keygen`: making a new key file. Reading one is rig::remote::read_key
// (rig/remote.hpp); reading a key a process is handed on a descriptor (rigd's `--key -`, and the
// key rigd hands each job process) is read_key_fd.
#pragma once

#include <cstdint>
#include <string_view>

#include "rig/remote.hpp"
#include "rig/result.hpp"

namespace rig::remote {

// Creates the file at `path` (never an existing one, nor through a symbolic link), with mode 0600
// whatever the umask, holding keygen_bytes random bytes, flushed to disk before it returns. On an
// error after the file was created it removes the file, so no partial key is left behind. The Error
// names the file and the reason.
Result<Unit> write_new_key(std::string_view path);

// How long read_key_fd waits for its descriptor's end: a writer that never closes is an error,
// not a process stuck at its start.
inline constexpr std::int64_t key_read_timeout_ms = 10'000;

// The key `fd` holds from where it stands to its end (a pipe's writer closing it), 16 to 4096
// bytes, within `timeout_ms`. A terminal is refused (the key would be echoed), and a regular file
// must pass read_key's checks (owned by this user, no access for group or others). `fd` is read,
// never closed. The Error starts "key on NAME: " and gives the reason and at most a count of
// bytes, never a byte of the key: "key on stdin: holds 3 bytes; a key has 16 to 4096 bytes".
Result<Key> read_key_fd(int fd, std::string_view name,
                        std::int64_t timeout_ms = key_read_timeout_ms);

}  // namespace rig::remote
