#include "remote/io/fault_transport.hpp"

#include <uv.h>

#include <algorithm>
#include <cstring>

#include "remote/io/guard.hpp"

namespace rig::remote {
namespace {

// The most a read into this transport's own buffer asks for.
constexpr std::size_t scratch_bytes_max = 64 * 1024;

}  // namespace

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, Reactor& reactor)
    : inner_(std::move(inner)), reactor_(reactor) {
  ticker_ = reactor_.add_ticker([this](std::int64_t) {
    guard([this] { poll(); }, [this](const std::string& what) { report_throw(what); });
  });
}

FaultTransport::~FaultTransport() {
  if (ticker_ != 0) reactor_.remove_ticker(ticker_);
}

void FaultTransport::report_throw(const std::string& what) noexcept {
  if (events_ != nullptr && !closed_) events_->on_transport_error(what);
}

// ---- the faults

void FaultTransport::drop(Flow flow, bool on) {
  (flow == Flow::out ? out_drop_ : in_drop_) = on;
}

void FaultTransport::delay(Flow flow, std::int64_t ms) {
  (flow == Flow::out ? out_delay_ms_ : in_delay_ms_) = std::max<std::int64_t>(ms, 0);
}

void FaultTransport::stall(Flow flow, bool on) {
  if (flow == Flow::out) {
    out_stall_ = on;
    return;
  }
  in_stall_ = on;
  if (on) {
    inner_->read_stop();
  } else if (reader_wants_) {
    inner_->read_start();
  }
}

void FaultTransport::corrupt(Flow flow, std::uint64_t offset, std::uint8_t mask) {
  (flow == Flow::out ? out_corrupt_ : in_corrupt_).push_back({offset, mask});
}

void FaultTransport::shut(Flow flow) {
  if (flow == Flow::out) {
    if (out_shut_) return;
    out_shut_ = true;
    inner_shutdown_wanted_ = true;
    flush_out(true);
    return;
  }
  if (in_shut_) return;
  in_shut_ = true;
  arriving_.clear();
  owed_eof_ = true;
}

bool FaultTransport::hits(const std::vector<Corruption>& corruptions, std::uint64_t offset,
                          std::size_t bytes) noexcept {
  return std::any_of(corruptions.begin(), corruptions.end(), [&](const Corruption& c) {
    return c.offset >= offset && c.offset - offset < bytes;
  });
}

void FaultTransport::apply(std::vector<Corruption>& corruptions, std::uint64_t offset,
                           std::span<std::uint8_t> bytes) noexcept {
  std::erase_if(corruptions, [&](const Corruption& c) {
    if (c.offset < offset || c.offset - offset >= bytes.size()) return false;
    bytes[static_cast<std::size_t>(c.offset - offset)] ^= c.mask;
    return true;
  });
}

void FaultTransport::poll() {
  if (closed_ || events_ == nullptr) return;
  flush_out(false);
  deliver_in();
  if (owed_eof_ && !read_ended_) {
    owed_eof_ = false;
    end_reading(UV_EOF);
  }
  if (owed_shutdown_) {
    const int status = *owed_shutdown_;
    owed_shutdown_.reset();
    events_->on_shutdown(status);
  }
}

// ---- writing

int FaultTransport::start(TransportEvents& events) {
  events_ = &events;
  return inner_->start(*this);
}

int FaultTransport::write(std::span<const Slice> slices) {
  if (out_shut_) return UV_EPIPE;
  std::size_t total = 0;
  for (const Slice& s : slices) total += s.bytes;
  if (out_drop_) {
    out_offset_ += total;
    return 0;
  }
  if (!out_stall_ && out_delay_ms_ == 0 && held_.empty() &&
      !hits(out_corrupt_, out_offset_, total)) {
    out_offset_ += total;
    const int rc = inner_->write(slices);
    if (rc == write_queued) inner_writes_.push_back({true, {}});
    return rc;
  }
  Held h{{}, reactor_.now_ms() + out_delay_ms_, out_stall_};
  h.bytes.reserve(total);
  for (const Slice& s : slices) h.bytes.insert(h.bytes.end(), s.data, s.data + s.bytes);
  apply(out_corrupt_, out_offset_, h.bytes);
  out_offset_ += total;
  if (h.writer_waits) held_waiting_bytes_ += total;
  const bool waits = h.writer_waits;
  held_.push_back(std::move(h));
  flush_out(true);
  return waits ? write_queued : 0;
}

void FaultTransport::flush_out(bool from_writer) {
  const std::int64_t now = reactor_.now_ms();
  while (!held_.empty() && !out_stall_) {
    Held& h = held_.front();
    if (h.due_ms > now || (h.writer_waits && from_writer)) return;
    const Slice s{h.bytes.data(), h.bytes.size()};
    const int rc = inner_->write({&s, 1});
    const bool waits = h.writer_waits;
    if (waits) held_waiting_bytes_ -= h.bytes.size();
    if (rc == write_queued) inner_writes_.push_back({waits, std::move(h.bytes)});
    held_.pop_front();
    if (waits && rc != write_queued) events_->on_written(rc);
  }
  if (held_.empty() && inner_shutdown_wanted_ && !inner_shutdown_issued_) {
    inner_shutdown_wanted_ = false;
    inner_shutdown_issued_ = true;
    const int rc = inner_->shutdown();
    if (rc != 0) inner_shutdown_status_ = rc;
    if (rc != 0 && writer_shutdown_) owed_shutdown_ = rc;
  }
}

void FaultTransport::on_written(int status) noexcept {
  guard(
      [&] {
        const bool for_writer = !inner_writes_.empty() && inner_writes_.front().for_writer;
        if (!inner_writes_.empty()) inner_writes_.pop_front();
        if (for_writer) events_->on_written(status);
      },
      [this](const std::string& what) { report_throw(what); });
}

int FaultTransport::shutdown() {
  if (writer_shutdown_) return UV_ENOTCONN;
  writer_shutdown_ = true;
  if (inner_shutdown_status_) {
    owed_shutdown_ = *inner_shutdown_status_;  // shut(out) ended the stream already
    return 0;
  }
  out_shut_ = true;
  if (!inner_shutdown_issued_) {
    inner_shutdown_wanted_ = true;
    flush_out(true);
  }
  return 0;
}

void FaultTransport::on_shutdown(int status) noexcept {
  guard(
      [&] {
        inner_shutdown_status_ = status;
        if (writer_shutdown_) events_->on_shutdown(status);
      },
      [this](const std::string& what) { report_throw(what); });
}

void FaultTransport::close() {
  inner_->close();
}

void FaultTransport::on_closed() noexcept {
  guard(
      [&] {
        closed_ = true;
        if (ticker_ != 0) {
          reactor_.remove_ticker(ticker_);
          ticker_ = 0;
        }
        // Writes still held here come after every write the inner transport cancelled.
        while (!held_.empty()) {
          const bool waits = held_.front().writer_waits;
          held_.pop_front();
          if (waits) events_->on_written(UV_ECANCELED);
        }
        held_waiting_bytes_ = 0;
        if (writer_shutdown_ && !inner_shutdown_status_ && !owed_shutdown_) {
          events_->on_shutdown(UV_ECANCELED);
        }
      },
      [](const std::string&) {});
  events_->on_closed();  // may destroy this
}

void FaultTransport::reset() {
  std::erase_if(held_, [](const Held& h) { return !h.writer_waits; });
  std::erase_if(arriving_, [](const Arriving& a) { return a.end == 0; });
  inner_->reset();
}

std::size_t FaultTransport::queued_bytes() const noexcept {
  return inner_->queued_bytes() + held_waiting_bytes_;
}

bool FaultTransport::send_state(TcpSendState& out) const noexcept {
  return inner_->send_state(out);
}

std::size_t FaultTransport::unread_bytes() const noexcept {
  return inner_->unread_bytes();
}

// ---- reading

int FaultTransport::read_start() {
  reader_wants_ = true;
  return in_stall_ ? 0 : inner_->read_start();
}

void FaultTransport::read_stop() {
  reader_wants_ = false;
  inner_->read_stop();
}

std::span<std::uint8_t> FaultTransport::read_buffer(std::size_t suggested) noexcept {
  into_scratch_ = in_drop_ || in_shut_ || read_ended_ || in_delay_ms_ > 0 || !arriving_.empty();
  if (!into_scratch_) {
    read_into_ = events_->read_buffer(suggested);
    return read_into_;
  }
  // Reserved in advance is not worth it: only a test with a fault active comes here.
  std::span<std::uint8_t> out;
  guard(
      [&] {
        scratch_.resize(std::clamp<std::size_t>(suggested, 1, scratch_bytes_max));
        out = scratch_;
      },
      [this](const std::string& what) { report_throw(what); });
  read_into_ = out;
  return out;
}

void FaultTransport::on_read(std::size_t bytes) noexcept {
  guard(
      [&] {
        const auto got = read_into_.first(bytes);
        apply(in_corrupt_, in_offset_, got);
        in_offset_ += bytes;
        if (!into_scratch_) {
          events_->on_read(bytes);
          return;
        }
        if (bytes == 0 || in_drop_ || in_shut_ || read_ended_) return;  // they vanish
        arriving_.push_back({{got.begin(), got.end()}, 0, reactor_.now_ms() + in_delay_ms_, 0});
        deliver_in();
      },
      [this](const std::string& what) { report_throw(what); });
}

void FaultTransport::on_read_end(int status) noexcept {
  guard(
      [&] {
        if (read_ended_ || in_shut_) return;  // the reader has its end already, or will
        if (!arriving_.empty() || in_delay_ms_ > 0) {
          arriving_.push_back({{}, 0, reactor_.now_ms() + in_delay_ms_, status});
          deliver_in();
          return;
        }
        end_reading(status);
      },
      [this](const std::string& what) { report_throw(what); });
}

void FaultTransport::end_reading(int status) {
  read_ended_ = true;
  arriving_.clear();
  events_->on_read_end(status);
}

void FaultTransport::deliver_in() {
  const std::int64_t now = reactor_.now_ms();
  while (!arriving_.empty() && reader_wants_ && !in_stall_ && !read_ended_) {
    Arriving& a = arriving_.front();
    if (a.due_ms > now) return;
    if (a.end != 0) {
      end_reading(a.end);
      return;
    }
    const std::size_t left = a.bytes.size() - a.at;
    const auto buf = events_->read_buffer(left);
    if (buf.empty()) {
      end_reading(UV_ENOBUFS);  // as libuv reports a read with no buffer
      return;
    }
    const std::size_t n = std::min(left, buf.size());
    std::memcpy(buf.data(), a.bytes.data() + a.at, n);
    a.at += n;
    if (a.at == a.bytes.size()) arriving_.pop_front();
    events_->on_read(n);
  }
}

void FaultTransport::on_connected(int status) noexcept {
  events_->on_connected(status);
}

void FaultTransport::on_transport_error(const std::string& what) noexcept {
  events_->on_transport_error(what);
}

}  // namespace rig::remote
