// A transport's user for the transport tests: records what it reads and every event, in order.
#pragma once

#include <uv.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/io/transport.hpp"

namespace rig::remote::test {

// Owner: a test, which keeps it alive longer than the transport it records. Threads: the test's.
class Recorder final : public TransportEvents {
 public:
  // Reads in pieces of at most `read_piece` bytes, so that a stream's order across reads shows.
  explicit Recorder(std::size_t read_piece = 7) : buffer_(read_piece) {}

  std::vector<std::uint8_t> bytes;  // everything read, in order
  std::vector<std::string> events;  // "connected 0", "end EOF", "written 0", "shutdown 0", "closed"
  int read_end = 0;                 // the status on_read_end gave, once it came
  bool closed = false;

  std::string text() const { return std::string(bytes.begin(), bytes.end()); }
  // The events other than reads, in order.
  std::string log() const {
    std::string out;
    for (const auto& e : events) out += (out.empty() ? "" : ", ") + e;
    return out;
  }

  void on_connected(int status) noexcept override { add("connected", status); }
  std::span<std::uint8_t> read_buffer(std::size_t) noexcept override { return buffer_; }
  void on_read(std::size_t n) noexcept override {
    bytes.insert(bytes.end(), buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  void on_read_end(int status) noexcept override {
    read_end = status;
    add("end", status);
  }
  void on_written(int status) noexcept override { add("written", status); }
  void on_shutdown(int status) noexcept override { add("shutdown", status); }
  void on_closed() noexcept override {
    closed = true;
    events.push_back("closed");
  }
  void on_transport_error(const std::string& what) noexcept override {
    events.push_back("error " + what);
  }

 private:
  void add(const char* what, int status) {
    events.push_back(std::string(what) + " " + (status == 0 ? "0" : uv_err_name(status)));
  }
  std::vector<std::uint8_t> buffer_;
};

// One slice over `text`, which must outlive the write.
inline Slice slice_of(const std::string& text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

}  // namespace rig::remote::test
