// One agent of a job as the controller sees it, and what it owes the controller: the answers the
// controller's messages asked for, in the order they were sent.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/pool.hpp"
#include "remote/controller/event.hpp"
#include "remote/wire/messages.hpp"
#include "rig/rig.hpp"

namespace rig::remote {

class Connection;

// The answer to a round trip (OPEN, MAKE, LOAD), or the job's root cause if the job failed or
// ended first. Owner: shared by the caller waiting for it and the loop. Threads: the loop fills it
// once, then sets `done`; the caller reads it after.
struct Reply {
  Event done;
  std::optional<Message> answer;
  std::vector<Device> devices;  // OPENED's devices, as proxies
  std::string failed;           // the cause when there is no answer
};

// One bulk copy into this process's memory that an agent sends back in DATA frames.
struct CopyBack {
  std::byte* at;
  std::size_t bytes;
};

// What an agent owes the controller next, in the order the controller sent the messages that ask
// for it. Owner: the submitter that builds it, then its member's queue on the loop thread.
struct Expect {
  enum class Kind : std::uint8_t { reached, opened, made, loaded, railed };
  Kind kind = Kind::reached;
  std::shared_ptr<Reply> reply;  // for the round trips
  // For a submission: where REACHED goes, the bytes its DATA frames fill, and the work itself,
  // held so that its buffers live until the agent has done it (its flow-control cost is a
  // function of it, flow.hpp).
  std::shared_ptr<rig::detail::DeviceCore> device;
  std::uint32_t device_id = 0;
  std::uint64_t value = 0;
  rig::detail::PoolVector<CopyBack> copies;
  std::size_t copy_index = 0;
  std::size_t copy_done = 0;
  rig::detail::Work work;
};

// The name of the answer `kind` expects ("REACHED"), for root causes.
const char* expect_name(Expect::Kind kind) noexcept;

// One agent of a job. Owner: the job's protocol (connect and launched name them first). Threads:
// the loop thread, but for the fields set before the protocol starts (name, dial_text, address).
struct Member {
  std::string name;       // "HOST:PORT", "HOST:PORT#2" or a launcher's NAME
  std::string dial_text;  // "HOST:PORT" as the other agents dial it
  sockaddr_storage address{};
  Connection* connection = nullptr;
  bool ready = false;
  bool closed = false;
  std::string host_arch;
  std::uint64_t host_budget = 0;
  std::shared_ptr<rig::detail::DeviceCore> host;
  // The machine's devices by the agent's id (0: the host), and what its agent owes, in order.
  std::map<std::uint32_t, std::shared_ptr<rig::detail::DeviceCore>> devices;
  std::deque<Expect> expects;
};

}  // namespace rig::remote
