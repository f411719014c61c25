// Kept apart: <linux/tcp.h> has the byte counts glibc's <netinet/tcp.h> lacks, and the two
// headers do not mix.
#include "remote/io/tcp_state.hpp"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>

namespace rig::remote {

bool tcp_send_state(int fd, TcpSendState& out) noexcept {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  if (len < offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked) return false;
  int queued = 0;
  if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0) return false;
  out = TcpSendState{info.tcpi_bytes_acked, static_cast<std::uint32_t>(queued)};
  return true;
}

std::size_t tcp_unread_bytes(int fd) noexcept {
  int unread = 0;
  if (ioctl(fd, SIOCINQ, &unread) != 0 || unread < 0) return 0;
  return static_cast<std::size_t>(unread);
}

}  // namespace rig::remote
