// The transport of real jobs: one TCP socket on the reactor's libuv loop. What a connection relies
// on from TCP lives here: the write that goes to the kernel at once (one writev per message, no
// request, no epoll change), the bulk read straight into the buffer its user names, Nagle off,
// TCP_USER_TIMEOUT as the kernel's backstop, and the kernel's acknowledged and unsent byte counts.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remote/io/transport.hpp"

namespace rig::remote {

// Owner: a connection (Transport). Threads: the loop thread. Lifetime: the libuv handle is made in
// start() and lives inside, so the object must not move or die between start() and on_closed.
class TcpTransport final : public Transport {
 public:
  // A transport that connects to `address` when started. `user_timeout_ms` is TCP_USER_TIMEOUT.
  static std::unique_ptr<TcpTransport> dial(uv_loop_t* loop, const sockaddr* address,
                                            std::int64_t user_timeout_ms);
  // A transport over `fd`, a connected socket, which it owns from now on (start() closes it on
  // failure, close() with the handle, the destructor if it never started).
  static std::unique_ptr<TcpTransport> adopt(uv_loop_t* loop, int fd, std::int64_t user_timeout_ms);

  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  bool dialing() const noexcept override { return dialing_; }
  int start(TransportEvents& events) override;
  int read_start() override;
  void read_stop() override;
  int write(std::span<const Slice> slices) override;
  int shutdown() override;
  void close() override;
  // Breaks the connection off with a RST: a TCP socket "connected" to AF_UNSPEC is disconnected
  // (connect(2)), which resets an established connection; both ends then read ECONNRESET.
  void reset() override;
  std::size_t queued_bytes() const noexcept override;
  int native_fd() const noexcept override;
  bool send_state(TcpSendState& out) const noexcept override;
  std::size_t unread_bytes() const noexcept override;
  std::string peer_address() const override;

 private:
  // A queued write's libuv request. Kept for the next write once done, so that a connection that
  // keeps the kernel's buffer full does not allocate one per write.
  struct WriteRequest {
    uv_write_t req{};
    TcpTransport* transport = nullptr;
  };

  TcpTransport(uv_loop_t* loop, std::int64_t user_timeout_ms);
  static void on_connect(uv_connect_t* req, int status) noexcept;
  static void on_alloc(uv_handle_t* h, std::size_t suggested, uv_buf_t* buf) noexcept;
  static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf) noexcept;
  static void on_write(uv_write_t* req, int status) noexcept;
  static void on_shutdown(uv_shutdown_t* req, int status) noexcept;
  static void on_close(uv_handle_t* h) noexcept;
  void tune_socket();
  void report_throw(const std::string& what) noexcept;
  uv_stream_t* stream() noexcept { return reinterpret_cast<uv_stream_t*>(&tcp_); }

  uv_loop_t* loop_;
  const std::int64_t user_timeout_ms_;
  bool dialing_ = false;
  sockaddr_storage address_{};  // where a dialing transport connects
  int fd_ = -1;                 // an adopted socket, until the handle takes it
  TransportEvents* events_ = nullptr;
  uv_tcp_t tcp_{};
  uv_connect_t connect_req_{};
  uv_shutdown_t shutdown_req_{};
  bool handle_open_ = false;  // initialized and not yet closing
  std::size_t writes_pending_ = 0;
  std::vector<uv_buf_t> bufs_;  // one write's buffers, reused: libuv copies them into its request
  std::vector<std::unique_ptr<WriteRequest>> spare_requests_;
};

}  // namespace rig::remote
