// rigd's small HTTP/1.1 server side: the bounded parser of one request's head, and the text of a
// response. No I/O here (the server in metrics_server.cpp does it), so that the fuzz target and
// the unit tests drive the parser with any bytes, cut anywhere.
//
// Only what a scraper and `rig status` send is understood: a request line and headers, no body,
// one request per connection (every response says `Connection: close`). Everything else is
// answered with a status and the connection closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rig::rigd {

// The limits of the metrics endpoint, in one place. A request's head (request line and headers)
// longer than this is answered 431: a scraper's head is a few hundred bytes.
inline constexpr std::size_t http_head_bytes_max = 8 * 1024;
// A client that has not sent a whole head, or not taken the whole response, this long after it
// connected is dropped: a scrape takes milliseconds, and a slow client must not hold a slot.
inline constexpr int http_client_timeout_ms = 5'000;
// Connections served at once; one more makes the oldest close, so that the backlog never fills
// with clients that wait for a slot, and a flood of slow ones never keeps a scraper out. Each costs
// at most the head bound and one response (a few KiB; /status holds at most one root cause, of at
// most 16 KiB), so the endpoint holds at most about 2 MiB.
inline constexpr std::size_t http_connections_max = 64;

// One request's head, as far as rigd cares: its method and its target (path and query).
struct HttpRequest {
  std::string method;
  std::string target;
};

// Reads one request's head from bytes as they come. Owner: the server's connection, one per
// client. Thread: the server's. Lifetime: the connection's.
class HttpRequestParser {
 public:
  enum class State { incomplete, done, bad };

  // Takes the next bytes; what the request is now. Bytes after the head are ignored (no body is
  // understood, and one request per connection is read).
  State feed(std::span<const std::uint8_t> bytes);
  State state() const { return state_; }
  // Once done: the request.
  const HttpRequest& request() const { return request_; }
  // Once bad: the status to answer with (400, 431, 505) and why, in a few words of ours.
  int status() const { return status_; }
  const std::string& why() const { return why_; }

 private:
  State fail(int status, std::string why);
  State parse_head();

  State state_ = State::incomplete;
  std::string head_;
  HttpRequest request_;
  int status_ = 0;
  std::string why_;
};

// The whole text of a response with `status`, `content_type` and `body`, closing the connection.
std::string http_response(int status, std::string_view content_type, std::string_view body);

// The reason phrase of the statuses rigd answers with ("OK", "Not Found", ...).
std::string_view http_reason(int status);

}  // namespace rig::rigd
