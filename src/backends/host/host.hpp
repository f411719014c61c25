// The CPU device: this process's host memory, and host code run on a worker thread.
#pragma once

#include <memory>

#include "core/device.hpp"

namespace rig::backends {

// Makes the host device ("CPU", arch the processor's level, budget the machine's memory).
std::shared_ptr<detail::DeviceCore> make_host_device();

// Whether `d` is this process's host device (a proxy of another machine's host is not).
bool is_local_host(const detail::DeviceCore& d) noexcept;

// Page-locked host memory from a GPU driver. Once one is installed, host buffers rig allocates
// come from it, so that copies between them and GPUs run by DMA without staging; until then, and
// whenever it cannot give the memory, they are plain aligned memory.
struct PinnedAllocator {
  void* (*allocate)(std::size_t bytes) noexcept;  // nullptr when it cannot
  void (*release)(void* p) noexcept;
};

// Installs `a` for every later host allocation. The first installation wins; it is never removed
// (memory already pinned is released through it whenever its buffer goes).
void install_pinned_allocator(PinnedAllocator a) noexcept;

// Whether `b` is a host buffer rig allocated from pinned memory (borrowed memory never is, here;
// a GPU driver may ask its own driver about that).
bool is_pinned_host_buffer(const detail::BufferCore& b) noexcept;

}  // namespace rig::backends
