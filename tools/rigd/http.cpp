#include "rigd/http.hpp"

#include <algorithm>

namespace rig::rigd {

namespace {

// RFC 9110's token characters: what a method may hold.
bool token_char(char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A request target's characters: visible ASCII (RFC 9112 has no spaces or controls in one).
bool target_char(char c) {
  return c > 0x20 && c < 0x7f;
}

// A header line's characters: visible ASCII, space and tab; obsolete folding is refused.
bool header_char(char c) {
  return (c >= 0x20 && c < 0x7f) || c == '\t';
}

}  // namespace

HttpRequestParser::State HttpRequestParser::fail(int status, std::string why) {
  state_ = State::bad;
  status_ = status;
  why_ = std::move(why);
  head_.clear();
  head_.shrink_to_fit();
  return state_;
}

HttpRequestParser::State HttpRequestParser::feed(std::span<const std::uint8_t> bytes) {
  if (state_ != State::incomplete) return state_;
  // Only as much as can still belong to a head within the bound is kept; one byte more is enough
  // to know the bound is passed.
  const std::size_t room = http_head_bytes_max + 1 - head_.size();
  const std::size_t take = std::min(room, bytes.size());
  const std::size_t searched_from = head_.size() >= 3 ? head_.size() - 3 : 0;
  head_.append(reinterpret_cast<const char*>(bytes.data()), take);
  // The head ends at the first empty line; a bare LF ends a line too (RFC 9112 allows it).
  std::size_t end = std::string::npos;
  for (std::size_t i = searched_from; i < head_.size(); ++i) {
    if (head_[i] != '\n') continue;
    if (i >= 1 && head_[i - 1] == '\n') {
      end = i + 1;
      break;
    }
    if (i >= 2 && head_[i - 1] == '\r' && head_[i - 2] == '\n') {
      end = i + 1;
      break;
    }
  }
  if (end == std::string::npos || end > http_head_bytes_max) {
    if (head_.size() > http_head_bytes_max) {
      return fail(431, "request head over " + std::to_string(http_head_bytes_max) + " bytes");
    }
    return state_;
  }
  head_.resize(end);
  return parse_head();
}

HttpRequestParser::State HttpRequestParser::parse_head() {
  std::string_view rest = head_;
  auto next_line = [&rest]() {
    const std::size_t lf = rest.find('\n');
    std::string_view line = rest.substr(0, lf);
    rest.remove_prefix(lf + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  // RFC 9112: a server should ignore empty lines before the request line.
  std::string_view line = next_line();
  while (line.empty() && !rest.empty()) line = next_line();
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "the request line is not METHOD TARGET VERSION");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), token_char)) {
    return fail(400, "the method is not a token");
  }
  if (target.empty() || !std::all_of(target.begin(), target.end(), target_char)) {
    return fail(400, "the target is empty or holds a space or control character");
  }
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(400, "the version is not HTTP/D.D");
  }
  if (version[5] != '1') return fail(505, "only HTTP/1.x is served");
  for (line = next_line(); !line.empty(); line = next_line()) {
    const std::size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos ||
        !std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(colon), token_char)) {
      return fail(400, "a header line is not NAME: VALUE");
    }
    if (!std::all_of(line.begin(), line.end(), header_char)) {
      return fail(400, "a header holds a control character");
    }
  }
  request_.method = method;
  request_.target = target;
  head_.clear();
  head_.shrink_to_fit();
  state_ = State::done;
  return state_;
}

std::string_view http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string http_response(int status, std::string_view content_type, std::string_view body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(http_reason(status)) +
                    "\r\nContent-Type: " + std::string(content_type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n";
  if (status == 405) out += "Allow: GET\r\n";
  out += "\r\n";
  out += body;
  return out;
}

}  // namespace rig::rigd
