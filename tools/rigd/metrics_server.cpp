#include "rigd/metrics_server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "remote/io/address.hpp"

namespace rig::rigd {

namespace {

using Clock = std::chrono::steady_clock;

// How long accepting pauses when the process has no descriptor for a new client: poll would
// report the listening socket ready again at once, for as long as none is free.
constexpr int accept_pause_ms = 100;

// One client, from its accept to its close. Owner: the server's loop; its thread.
struct Client {
  int fd = -1;
  Clock::time_point deadline;
  HttpRequestParser parser;
  std::string out;  // the response's bytes not yet sent
  std::size_t sent = 0;
  bool answered = false;  // the response is made; what is read now is only drained
};

}  // namespace

std::string metrics_response(const HttpRequestParser& parsed, const Metrics& metrics) {
  if (parsed.state() == HttpRequestParser::State::bad) {
    return http_response(parsed.status(), "text/plain; charset=utf-8", parsed.why() + "\n");
  }
  const HttpRequest& r = parsed.request();
  const std::string path = r.target.substr(0, r.target.find('?'));
  if (path != "/metrics" && path != "/status") {
    return http_response(404, "text/plain; charset=utf-8",
                         "rigd serves /metrics and /status only\n");
  }
  if (r.method != "GET") {
    return http_response(405, "text/plain; charset=utf-8", "only GET is served\n");
  }
  if (path == "/metrics") {
    return http_response(200, "text/plain; version=0.0.4; charset=utf-8",
                         metrics.prometheus_text());
  }
  return http_response(200, "application/json", metrics.status_json());
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            const Metrics& metrics) {
  const std::string where = rig::remote::address_text(host, port);
  auto address = rig::remote::resolve(host, port);
  if (!address) return Error("cannot serve metrics at " + where + ": " + address.error());
  const int fd = ::socket(address->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error("cannot serve metrics at " + where + ": " + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const socklen_t len = address->ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*address), len) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    ::close(fd);
    return Error("cannot serve metrics at " + where + ": " + std::strerror(e));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  const int actual = bound.ss_family == AF_INET6
                         ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int stop = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop < 0) {
    const int e = errno;
    ::close(fd);
    return Error("cannot serve metrics at " + where + ": " + std::strerror(e));
  }
  auto server = std::unique_ptr<MetricsServer>(new MetricsServer(fd, stop, actual, metrics));
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  return server;
}

MetricsServer::MetricsServer(int listen_fd, int stop_fd, int port, const Metrics& metrics)
    : listen_fd_(listen_fd), stop_fd_(stop_fd), port_(port), metrics_(metrics) {}

MetricsServer::~MetricsServer() {
  const std::uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void MetricsServer::run() {
  pthread_setname_np(pthread_self(), "rigd-metrics");
  std::list<Client> clients;
  std::vector<pollfd> fds;
  std::vector<Client*> polled;
  Clock::time_point accept_again{};
  auto close_client = [&](std::list<Client>::iterator it) {
    ::close(it->fd);
    return clients.erase(it);
  };
  for (;;) {
    const auto now = Clock::now();
    fds.clear();
    polled.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({now >= accept_again ? listen_fd_ : -1, POLLIN, 0});
    auto next = now + std::chrono::milliseconds(http_client_timeout_ms);
    if (now < accept_again) next = std::min(next, accept_again);
    for (auto& c : clients) {
      const short events = c.answered && c.sent < c.out.size() ? POLLOUT : POLLIN;
      fds.push_back({c.fd, events, 0});
      polled.push_back(&c);
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(wait, 0))) < 0 &&
        errno != EINTR) {
      return;  // only a bug of ours (EFAULT, EINVAL) gets here
    }
    if (fds[0].revents != 0) break;

    // Each ready client, read or written as far as it goes now.
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Client& c = *polled[i];
      const short ready = fds[i + 2].revents;
      if (ready == 0) continue;
      if (!c.answered || (ready & POLLIN) != 0) {
        std::uint8_t buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          c.deadline = Clock::time_point{};  // gone (or drained to its end): closed below
          continue;
        }
        if (n > 0 && !c.answered &&
            c.parser.feed({buf, static_cast<std::size_t>(n)}) !=
                HttpRequestParser::State::incomplete) {
          c.out = metrics_response(c.parser, metrics_);
          c.answered = true;
        }
      }
      if (c.answered && c.sent < c.out.size()) {
        const ssize_t n =
            ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          c.deadline = Clock::time_point{};
          continue;
        }
        if (n > 0) c.sent += static_cast<std::size_t>(n);
        if (c.sent == c.out.size()) {
          // All sent: our side ends; what the client still sends is read until it closes (or its
          // time is up), so that unread bytes do not make the close a reset that loses the reply.
          ::shutdown(c.fd, SHUT_WR);
          c.out.clear();
          c.out.shrink_to_fit();
          c.sent = 0;
        }
      }
    }
    // Clients whose time is up, or that are gone.
    const auto after = Clock::now();
    for (auto it = clients.begin(); it != clients.end();) {
      it = it->deadline <= after ? close_client(it) : std::next(it);
    }

    if (fds[1].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_again = Clock::now() + std::chrono::milliseconds(accept_pause_ms);
          }
          break;  // EAGAIN: none left; ECONNABORTED and the like: the next poll tries again
        }
        // At the bound, the oldest client makes way: clients that hold their slots without a
        // request (a flood of slow ones) cannot keep a scraper out, who comes after them.
        if (clients.size() >= http_connections_max) close_client(clients.begin());
        Client& c = clients.emplace_back();
        c.fd = fd;
        c.deadline = Clock::now() + std::chrono::milliseconds(http_client_timeout_ms);
      }
    }
  }
  for (auto it = clients.begin(); it != clients.end();) it = close_client(it);
}

}  // namespace rig::rigd
