#include "remote/io/memory_transport.hpp"

#include <uv.h>

#include <algorithm>
#include <cstring>

#include "remote/io/guard.hpp"

namespace rig::remote {

// The bytes going one way between two ends.
struct MemoryDirection {
  std::vector<std::uint8_t> data;  // unread bytes from `head` on
  std::size_t head = 0;
  std::uint64_t handed = 0;  // every byte the writer handed on
  std::uint64_t taken = 0;   // every byte the reader took: the writer's "acknowledged"
  bool ended = false;        // the writer ended its side: EOF once the data is read
  bool reset = false;        // a reset: the reader's reads end with UV_ECONNRESET after the data
  bool reader_gone = false;  // the reader closed: what arrives vanishes and is answered by a reset

  std::size_t unread() const noexcept { return data.size() - head; }
  void discard() noexcept {
    data.clear();
    head = 0;
  }
  void take(std::size_t n) noexcept {
    head += n;
    taken += n;
    if (head == data.size()) {
      discard();
    } else if (head >= data.size() / 2) {
      data.erase(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
  }
  void reset_now(bool lose_unread) noexcept {
    reset = true;
    if (lose_unread) {
      discard();
      ended = false;
    }
  }
};

struct MemoryTransport::Link {
  std::size_t capacity;
  MemoryDirection to[2];  // to[s]: what side s writes
};

MemoryNetwork::MemoryNetwork(std::size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}

MemoryNetwork::~MemoryNetwork() {
  for (MemoryTransport* e : ends_) {
    if (e != nullptr) e->network_ = nullptr;
  }
}

MemoryNetwork::Pair MemoryNetwork::connect(std::string dialer_address,
                                           std::string listener_address) {
  auto link = std::make_shared<MemoryTransport::Link>();
  link->capacity = buffer_bytes_;
  std::unique_ptr<MemoryTransport> d(
      new MemoryTransport(this, link, 0, true, std::move(listener_address)));
  std::unique_ptr<MemoryTransport> l(
      new MemoryTransport(this, link, 1, false, std::move(dialer_address)));
  return {std::move(d), std::move(l)};
}

std::unique_ptr<MemoryTransport> MemoryNetwork::unreachable(int status) {
  auto link = std::make_shared<MemoryTransport::Link>();
  link->capacity = buffer_bytes_;
  link->to[0].reader_gone = true;
  std::unique_ptr<MemoryTransport> d(new MemoryTransport(this, link, 0, true, "?"));
  d->connect_status_ = status;
  return d;
}

std::size_t MemoryNetwork::pump(std::size_t steps_max) {
  std::size_t steps = 0;
  for (bool any = true; any && steps < steps_max;) {
    any = false;
    // Ends made or destroyed by the events themselves: indices stay valid (only appends), and a
    // destroyed end leaves a null.
    for (std::size_t i = 0; i < ends_.size() && steps < steps_max; ++i) {
      MemoryTransport* e = ends_[i];
      if (e == nullptr) continue;
      bool acted = false;
      // A throw can come only before on_closed, the last thing an end's step does: `e` is alive.
      guard([&] { acted = e->step(); },
            [e](const std::string& what) { e->events_->on_transport_error(what); });
      if (acted) {
        any = true;
        ++steps;
      }
    }
    std::erase(ends_, nullptr);
  }
  return steps;
}

MemoryTransport::MemoryTransport(MemoryNetwork* network, std::shared_ptr<Link> link, int side,
                                 bool dialing, std::string peer_address)
    : network_(network),
      link_(std::move(link)),
      side_(side),
      dialing_(dialing),
      peer_address_(std::move(peer_address)) {
  network_->ends_.push_back(this);
}

MemoryTransport::~MemoryTransport() {
  if (!closed_) leave_link();
  if (network_ != nullptr) {
    auto it = std::find(network_->ends_.begin(), network_->ends_.end(), this);
    if (it != network_->ends_.end()) *it = nullptr;
  }
}

int MemoryTransport::start(TransportEvents& events) {
  events_ = &events;
  connect_due_ = dialing_;
  return 0;
}

int MemoryTransport::read_start() {
  if (close_requested_) return UV_EINVAL;
  if (!read_ended_) reading_ = true;
  return 0;
}

void MemoryTransport::read_stop() {
  reading_ = false;
}

std::uint64_t MemoryTransport::bytes_sent() const noexcept {
  return link_->to[side_].handed;
}

void MemoryTransport::append(std::vector<Slice>& slices) {
  MemoryDirection& out = link_->to[side_];
  std::size_t used = 0;
  for (Slice& s : slices) {
    const std::size_t room = link_->capacity - std::min(link_->capacity, out.unread());
    if (room == 0) break;
    const std::size_t n = std::min(room, s.bytes);
    out.data.insert(out.data.end(), s.data, s.data + n);
    out.handed += n;
    pending_bytes_ -= std::min(pending_bytes_, n);
    s.data += n;
    s.bytes -= n;
    if (s.bytes > 0) break;
    ++used;
  }
  slices.erase(slices.begin(), slices.begin() + static_cast<std::ptrdiff_t>(used));
}

int MemoryTransport::write(std::span<const Slice> slices) {
  if (close_requested_ || shutdown_requested_) return UV_EPIPE;
  ++writes_;
  MemoryDirection& out = link_->to[side_];
  std::vector<Slice> rest;
  std::size_t bytes = 0;
  for (const Slice& s : slices) {
    if (s.bytes == 0) continue;
    rest.push_back(s);
    bytes += s.bytes;
  }
  if (out.reset || out.reader_gone) {
    // Into a stream that is gone: the bytes vanish, and a closed reader answers with a reset.
    if (out.reader_gone) link_->to[1 - side_].reset_now(false);
    return 0;
  }
  pending_bytes_ += bytes;
  if (pending_.empty() && done_unreported_ == 0) {
    append(rest);
    if (rest.empty()) return 0;
  }
  pending_.push_back({std::move(rest)});
  return write_queued;
}

bool MemoryTransport::flush() {
  bool moved = false;
  MemoryDirection& out = link_->to[side_];
  while (!pending_.empty()) {
    PendingWrite& w = pending_.front();
    if (out.reset || out.reader_gone) {
      if (out.reader_gone) link_->to[1 - side_].reset_now(false);
      for (const Slice& s : w.slices) pending_bytes_ -= std::min(pending_bytes_, s.bytes);
      w.slices.clear();
    } else {
      const std::size_t before = pending_bytes_;
      append(w.slices);
      moved = moved || pending_bytes_ != before;
    }
    if (!w.slices.empty()) break;
    pending_.pop_front();
    ++done_unreported_;
    moved = true;
  }
  return moved;
}

int MemoryTransport::shutdown() {
  if (close_requested_ || shutdown_requested_) return UV_ENOTCONN;
  shutdown_requested_ = true;
  return 0;
}

void MemoryTransport::close() {
  close_requested_ = true;
}

void MemoryTransport::reset() {
  for (MemoryDirection& d : link_->to) d.reset_now(true);
}

std::size_t MemoryTransport::queued_bytes() const noexcept {
  return pending_bytes_;
}

bool MemoryTransport::send_state(TcpSendState& out) const noexcept {
  const MemoryDirection& d = link_->to[side_];
  out = TcpSendState{d.taken, static_cast<std::uint32_t>(d.unread())};
  return true;
}

std::size_t MemoryTransport::unread_bytes() const noexcept {
  return link_->to[1 - side_].unread();
}

bool MemoryTransport::step() {
  if (events_ == nullptr || closed_ || (stopped_ != nullptr && *stopped_)) return false;
  if (close_requested_) {
    finish_close();  // may destroy this
    return true;
  }
  if (connect_due_) {
    connect_due_ = false;
    events_->on_connected(connect_status_);
    return true;
  }
  bool acted = flush();
  while (done_unreported_ > 0 && !close_requested_) {
    --done_unreported_;
    events_->on_written(0);
    acted = true;
  }
  if (shutdown_requested_ && !shutdown_reported_ && pending_.empty() && done_unreported_ == 0 &&
      !close_requested_) {
    shutdown_reported_ = true;
    MemoryDirection& out = link_->to[side_];
    const bool gone = out.reset || out.reader_gone;
    out.ended = true;
    events_->on_shutdown(gone ? UV_ENOTCONN : 0);
    acted = true;
  }
  MemoryDirection& in = link_->to[1 - side_];
  while (reading_ && !held_ && !read_ended_ && !close_requested_) {
    if (in.unread() > 0) {
      const auto buf = events_->read_buffer(in.unread());
      if (buf.empty()) {
        read_ended_ = true;
        reading_ = false;
        events_->on_read_end(UV_ENOBUFS);
      } else {
        const std::size_t n = std::min(buf.size(), in.unread());
        std::memcpy(buf.data(), in.data.data() + in.head, n);
        in.take(n);
        events_->on_read(n);
      }
      acted = true;
      continue;
    }
    if (in.ended || in.reset) {
      read_ended_ = true;
      reading_ = false;
      events_->on_read_end(in.ended ? UV_EOF : UV_ECONNRESET);
      acted = true;
    }
    break;
  }
  return acted;
}

void MemoryTransport::finish_close() {
  closed_ = true;
  if (connect_due_) {
    connect_due_ = false;
    events_->on_connected(UV_ECANCELED);  // as libuv cancels a pending connect
  }
  // libuv's order: writes already handed on report success, those still queued are cancelled,
  // a shutdown not yet done is cancelled, and the close comes last.
  while (done_unreported_ > 0) {
    --done_unreported_;
    events_->on_written(0);
  }
  while (!pending_.empty()) {
    pending_.pop_front();
    events_->on_written(UV_ECANCELED);
  }
  pending_bytes_ = 0;
  if (shutdown_requested_ && !shutdown_reported_) {
    shutdown_reported_ = true;
    events_->on_shutdown(UV_ECANCELED);
  }
  leave_link();
  events_->on_closed();  // may destroy this
}

void MemoryTransport::leave_link() noexcept {
  MemoryDirection& out = link_->to[side_];
  MemoryDirection& in = link_->to[1 - side_];
  // TCP's close: a FIN after what was written, but a reset if bytes toward us lie unread, which
  // loses what we wrote that the peer has not taken.
  if (in.unread() > 0) {
    out.reset_now(true);
  } else {
    out.ended = true;
  }
  in.discard();
  in.reader_gone = true;
}

}  // namespace rig::remote
