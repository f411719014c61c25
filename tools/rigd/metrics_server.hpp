// rigd --metrics HOST:PORT: the HTTP endpoint, on a thread of its own in the daemon, so that it
// answers between jobs and while a job process is busy or dying, and never holds up the daemon's
// main thread (it reads Metrics under its lock, which the main thread holds only to update a few
// fields). One poll loop serves every client without blocking: a request's head is read within
// http_head_bytes_max and http_client_timeout_ms, answered, and the connection closed; beyond
// http_connections_max clients, a new one makes the oldest close.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "rig/result.hpp"
#include "rigd/http.hpp"
#include "rigd/metrics.hpp"

namespace rig::rigd {

// Owner: main. Thread: made on main's; serves on its own, which it starts and joins. Lifetime:
// from start to its destructor, within the life of the Metrics it renders.
class MetricsServer {
 public:
  // Listens at `host`:`port` (0: the system chooses) and starts serving `metrics`. Error (naming
  // the address) if it cannot listen. The thread it starts takes the caller's signal mask.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port,
                                                      const Metrics& metrics);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsServer(int listen_fd, int stop_fd, int port, const Metrics& metrics);
  void run();

  const int listen_fd_;
  const int stop_fd_;  // an eventfd: the destructor's word to end the loop
  const int port_;
  const Metrics& metrics_;
  std::thread thread_;
};

// The response to one parsed request (or to a bad one): what the endpoint routes, without I/O.
std::string metrics_response(const HttpRequestParser& parsed, const Metrics& metrics);

}  // namespace rig::rigd
