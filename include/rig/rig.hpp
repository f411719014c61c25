// rig: the local device runtime. Devices, timelines, buffers, submissions and failure.
//
// Every handle here (Device, Buffer, Image) is a cheap, copyable reference to state the runtime
// owns; the state lives as long as the last handle or the last submission that uses it. Every call
// is safe from many threads at once. See docs/local.md for the model and a complete example.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rig/result.hpp"

namespace rig {

namespace detail {
class DeviceCore;
class BufferCore;
class ImageCore;
}  // namespace detail

// A device, or the process as a whole, has been lost; what() is the root cause, as given to
// rig::fail or recorded by the backend that lost the device. Every use after the loss raises it.
class Lost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device could not hold an allocation within its budget; what() names the device and the sizes.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind : std::uint8_t { cpu, sim, cuda };

// "CPU", "SIM", "CUDA"; and the reverse, which is empty for an unknown name.
std::string_view kind_name(Kind kind) noexcept;
std::optional<Kind> kind_from_name(std::string_view name) noexcept;

// A handle to something that holds memory and runs work in submission order. Devices compare equal
// when they are the same device. A default-constructed Device is no device; using it is misuse.
class Device {
 public:
  Device() = default;

  Kind kind() const;
  const std::string& name() const;  // "CPU", "SIM:0", "CUDA:3", "CUDA:3@h100-b"
  const std::string& arch() const;  // "x86_64-v3", "sim", "sm_90"
  std::uint64_t budget() const;     // bytes this device may allocate in all

  // The device's timeline: the value its completed work has reached (acquire order, so the work's
  // effects on this process's memory are visible to the caller).
  std::uint64_t reached() const;
  // Returns once reached() >= value. Spins briefly, then sleeps. Raises Lost if the device is lost,
  // waking at once if that happens during the wait, and invalid_argument for a value never issued.
  void wait(std::uint64_t value) const;

  explicit operator bool() const noexcept { return core_ != nullptr; }
  friend bool operator==(const Device& a, const Device& b) noexcept { return a.core_ == b.core_; }

  // For the runtime's own layers (core, remote); not part of the stable API.
  explicit Device(std::shared_ptr<detail::DeviceCore> core) noexcept : core_(std::move(core)) {}
  const std::shared_ptr<detail::DeviceCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<detail::DeviceCore> core_;
};

// This process's host: host memory and host code. Always present.
Device host();

// Every device of `kind` on this machine, in index order. The first call opens them; later calls
// return the same devices until they are closed. CUDA gives none where the driver cannot be used
// (rig/cuda.hpp's open says why).
// SIM devices come from the sim options (rig/sim.hpp). Raises Lost once the process has failed.
std::vector<Device> open(Kind kind);

// Whether work on `a` may read and write memory of `b` (copies between them may run on `a`).
bool reaches(const Device& a, const Device& b);

// Waits for the work submitted to `d`, then frees its memory and stops it. Buffers of a closed
// device become unusable (invalid_argument on use). Closing the host is misuse; closing twice is
// nothing. A lost device closes without waiting.
void close(const Device& d);

// Loses every device of this process with `why`, the root cause. Every later use raises Lost(why)
// and every thread waiting on a device wakes with it. The first cause wins; later calls do nothing.
void fail(std::string why);

// The root cause `d` was lost with, if it was lost.
std::optional<std::string> failure(const Device& d);
// The root cause the process was failed with (rig::fail), if it was.
std::optional<std::string> process_failure();

// Memory on one device. Host buffers (on host()) are either rig's allocations or borrowed memory of
// this process; host access to them waits for the device work that uses them.
class Buffer {
 public:
  Buffer() = default;

  // A buffer of `bytes` on `d`; raises OutOfMemory beyond the device's budget.
  static Buffer make(const Device& d, std::size_t bytes);
  // `bytes` of this process's memory at `data` as a buffer on host(), without a copy. The memory
  // must outlive every submission that uses the buffer.
  static Buffer borrow(void* data, std::size_t bytes);

  const Device& device() const;
  std::size_t size() const;

  // Host access (host buffers only): waits until no submitted work uses the buffer, then gives its
  // bytes. Raises Lost if that work's device is lost, invalid_argument for a device buffer.
  std::span<std::byte> access() const;

  explicit operator bool() const noexcept { return core_ != nullptr; }
  friend bool operator==(const Buffer& a, const Buffer& b) noexcept { return a.core_ == b.core_; }

  explicit Buffer(std::shared_ptr<detail::BufferCore> core) noexcept : core_(std::move(core)) {}
  const std::shared_ptr<detail::BufferCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<detail::BufferCore> core_;
};

// A point on one device's timeline: where a submission's work completes.
struct Fence {
  Device device;
  std::uint64_t value = 0;

  bool reached() const { return device.reached() >= value; }
  void wait() const { device.wait(value); }
};

// A program loaded on one device (rig/program.hpp makes them).
class Image {
 public:
  Image() = default;
  const Device& device() const;
  explicit operator bool() const noexcept { return core_ != nullptr; }

  explicit Image(std::shared_ptr<detail::ImageCore> core) noexcept : core_(std::move(core)) {}
  const std::shared_ptr<detail::ImageCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<detail::ImageCore> core_;
};

// The parts of a submission.

// Copies `bytes` from src at src_offset to dst at dst_offset.
struct Copy {
  Buffer dst;
  std::size_t dst_offset = 0;
  Buffer src;
  std::size_t src_offset = 0;
  std::size_t bytes = 0;
};

enum class Access : std::uint8_t { read, write, read_write };

namespace detail {
class RunObject;
}  // namespace detail
namespace remote {
class Rail;
}  // namespace remote

// A run argument: a plain 64-bit word, or the device address of a buffer (plus an offset) with the
// access the run makes to it, which orders the run against other work on that buffer, or an object
// of rig's that the run's code receives the address of its record for (a rail: rig_rail).
struct Arg {
  struct Mem {
    Buffer buffer;
    Access access = Access::read;
    std::size_t offset = 0;
  };
  struct Object {
    std::shared_ptr<const detail::RunObject> object;
  };
  std::variant<std::uint64_t, Mem, Object> value;

  static Arg word(std::uint64_t w) { return Arg{w}; }
  static Arg f32(float f);
  static Arg in(Buffer b, std::size_t offset = 0) {
    return Arg{Mem{std::move(b), Access::read, offset}};
  }
  static Arg out(Buffer b, std::size_t offset = 0) {
    return Arg{Mem{std::move(b), Access::write, offset}};
  }
  static Arg inout(Buffer b, std::size_t offset = 0) {
    return Arg{Mem{std::move(b), Access::read_write, offset}};
  }
  // Rail `r`, for host code on one of its two machines, run on that machine's host (a host of the
  // rail's job): the code receives the address of a rig_rail (rig/kernel.h) and may drive the rail
  // from there; the controller's go() then raises. Defined by rig::remote (rig/remote.hpp).
  static Arg rail(const remote::Rail& r);
};

// A launch shape: a grid of blocks of threads. Host code sees it and walks it itself.
struct Shape {
  std::uint32_t grid[3] = {1, 1, 1};
  std::uint32_t block[3] = {1, 1, 1};

  static Shape linear(std::uint32_t blocks, std::uint32_t threads = 1) {
    return Shape{{blocks, 1, 1}, {threads, 1, 1}};
  }
};

// Runs `entry` of `image` with `shape` and `args` on the image's device.
struct Run {
  Image image;
  std::string entry;
  Shape shape;
  std::vector<Arg> args;
};

using Part = std::variant<Copy, Run>;

// Submits `parts` to `d`, to run in order after the work submitted to `d` before and after earlier
// work, on any device, that wrote memory these parts read, or used memory they write. Returns the
// value d's timeline reaches once the parts are done. Never blocks on other devices' work.
// invalid_argument for misuse (bounds, a buffer `d` does not reach, a closed device, an image of
// another device, an unknown entry), Lost if `d` or a device it must wait on is lost.
std::uint64_t submit(const Device& d, std::span<const Part> parts);
inline std::uint64_t submit(const Device& d, const Part& part) {
  return submit(d, std::span<const Part>(&part, 1));
}

// One copy, submitted to a device that reaches both buffers: the destination's device if it does,
// else the source's. A copy of no bytes is done at once. invalid_argument if neither device reaches
// the other.
Fence copy(const Buffer& dst, std::size_t dst_offset, const Buffer& src, std::size_t src_offset,
           std::size_t bytes);
inline Fence copy(const Buffer& dst, const Buffer& src) {
  return copy(dst, 0, src, 0, src.size() < dst.size() ? src.size() : dst.size());
}

}  // namespace rig
