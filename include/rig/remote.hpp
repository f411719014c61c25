// rig::remote: jobs, in which one process uses the devices of other machines through an agent on
// each. So far this header holds the job's key; the job itself (connect, hosts, devices, listen,
// serve) lands with the rest of the remote layer. docs/security.md says what the key protects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string_view>

#include "rig/result.hpp"

namespace rig::remote {

class Key;

namespace detail {
// The key's bytes, for the handshake's MAC. Not part of the API: nothing else may read them.
std::span<const std::uint8_t> key_bytes(const Key& key) noexcept;
}  // namespace detail

// A job's key: 16 to 4096 secret bytes that every process of a job holds and proves to the others.
// It cannot be printed (no operator<<), its memory is wiped when it is destroyed, and equality runs
// in time independent of the bytes. Make one with key() or read_key().
//
// Owner: whoever holds it; copies are independent and each wipes its own bytes. Immutable, so any
// thread may use one at once. A moved-from Key holds no bytes and may only be destroyed or
// assigned.
class Key {
 public:
  Key(const Key& other);
  Key(Key&& other) noexcept;
  Key& operator=(const Key& other);
  Key& operator=(Key&& other) noexcept;
  ~Key();

  // The number of bytes (not secret: it is in every error about a key).
  std::size_t size() const noexcept { return size_; }

  // Same bytes; for equal sizes it compares in constant time.
  friend bool operator==(const Key& a, const Key& b) noexcept;
  // A key is never printed, not even by accident in a test's failure message.
  friend std::ostream& operator<<(std::ostream& os, const Key& key) = delete;

 private:
  explicit Key(std::span<const std::uint8_t> bytes);
  void wipe() noexcept;

  friend Result<Key> key(std::string_view bytes);
  friend Result<Key> read_key(std::string_view path);
  friend std::span<const std::uint8_t> detail::key_bytes(const Key& key) noexcept;

  std::unique_ptr<std::uint8_t[]> bytes_;
  std::size_t size_ = 0;
};

// `bytes` as a key, or an Error giving its length (never its bytes) if it has fewer than 16 or more
// than 4096.
Result<Key> key(std::string_view bytes);

// The key in the file at `path`, read through a single open(2). The file must be a regular file (a
// FIFO is refused at once, without waiting for a writer), owned by this process's effective user,
// with no permission bits for its group or others, and hold 16 to 4096 bytes. A symbolic link is
// followed, and every check applies to the file actually opened. The Error names the file and the
// reason, never the bytes.
Result<Key> read_key(std::string_view path);

}  // namespace rig::remote
