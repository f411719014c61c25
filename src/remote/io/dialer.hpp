// The dialing seam: how a job's protocol gets a connection to another process of the job. The
// controller dials each agent, and each agent the agents after it in JOIN; both only name the
// process and its "HOST:PORT", and a Dialer makes the transport. Real jobs dial over TCP
// (tcp_dialer); a simulation routes each dial to the process it names over a MemoryNetwork.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>

#include "remote/io/reactor.hpp"
#include "remote/io/timing.hpp"
#include "remote/io/transport.hpp"
#include "rig/result.hpp"

namespace rig::remote {

// Owner: whoever makes the job's protocol, which holds it by reference and must be outlived by it.
// Threads: the loop thread of the protocol that dials.
class Dialer {
 public:
  virtual ~Dialer() = default;
  // A transport still to connect (Transport::dialing) to the process named `name` at `address`
  // ("HOST:PORT"), for a connection on `reactor` with `timing`. `resolved`, when not null, is that
  // address resolved already (connect resolves before it starts a job, so that a name that does
  // not resolve is its Error before anything is dialed). Error: why it cannot be dialed, without
  // the name, which the caller puts in front.
  virtual Result<std::unique_ptr<Transport>> dial(Reactor& reactor, const Timing& timing,
                                                  const std::string& name,
                                                  const std::string& address,
                                                  const sockaddr_storage* resolved) = 0;

 protected:
  Dialer() = default;
};

// The dialer of real jobs: resolves `address` (unless resolved already) and makes a TcpTransport.
// It holds nothing, so one serves every job of the process. Threads: any loop thread.
Dialer& tcp_dialer();

}  // namespace rig::remote
