// What the kernel knows of a TCP connection's sending side, for the send-progress rule: a send
// "makes progress" when the peer acknowledges bytes, which covers bytes already handed to the
// kernel, not only those still queued in the loop.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rig::remote {

struct TcpSendState {
  std::uint64_t acked_bytes;   // every byte the peer has acknowledged since the connection opened
  std::uint32_t queued_bytes;  // bytes in the kernel not yet acknowledged (sent or not)
};

// Fills `out`; false if the socket cannot say (not TCP, or a kernel without TCP_INFO's byte
// counts). Not an optional: GCC 12 at -O1 under TSan warns, wrongly, that its value may be unset.
bool tcp_send_state(int fd, TcpSendState& out) noexcept;

// Bytes the kernel holds for socket `fd` that arrived and are not yet read; 0 if it cannot say.
std::size_t tcp_unread_bytes(int fd) noexcept;

}  // namespace rig::remote
