// A small HTTP/1.1 client for `rig status`: one request on a connection of its own, the whole
// response read until the server closes, every step within one deadline. The tests of rigd's
// endpoint send their hostile requests through the same exchange.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rig/result.hpp"

namespace rig::cli {

// The most of a response kept: rigd's are a few KiB (a /status with a root cause of 16 KiB at
// most); more is a server that is not rigd's endpoint.
inline constexpr std::size_t http_reply_bytes_max = 256 * 1024;

// Connects to `host`:`port`, sends `request` as it is, and reads what comes until the server
// closes: the bytes read. Error naming the step (connect, send, read) and why, or that
// `timeout_ms` passed, or that the reply passed http_reply_bytes_max.
Result<std::string> http_exchange(const std::string& host, int port, std::string_view request,
                                  int timeout_ms);

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET `path` (HTTP/1.1, Connection: close) from `host`:`port` within `timeout_ms`: the status, the
// content type and the body (as far as Content-Length says, if it does). Error as http_exchange,
// or if what came is not an HTTP/1.x response.
Result<HttpReply> http_get(const std::string& host, int port, const std::string& path,
                           int timeout_ms);

}  // namespace rig::cli
