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

}  // namespace rig::remote
