#include "remote/io/dialer.hpp"

#include "remote/io/address.hpp"
#include "remote/io/tcp_transport.hpp"

namespace rig::remote {
namespace {

class TcpDialer final : public Dialer {
 public:
  Result<std::unique_ptr<Transport>> dial(Reactor& reactor, const Timing& timing,
                                          const std::string&, const std::string& address,
                                          const sockaddr_storage* resolved) override {
    if (resolved != nullptr) return dial_at(reactor, timing, *resolved);
    auto parsed = parse_address(address);
    if (!parsed) return Error(parsed.error());
    // A numeric address resolves without a lookup; a name that needs DNS blocks the loop for that
    // lookup, once, at the job's start.
    auto found = resolve(parsed->host, parsed->port);
    if (!found) return Error(found.error());
    return dial_at(reactor, timing, *found);
  }

 private:
  static std::unique_ptr<Transport> dial_at(Reactor& reactor, const Timing& timing,
                                            const sockaddr_storage& at) {
    return TcpTransport::dial(reactor.loop(), reinterpret_cast<const sockaddr*>(&at),
                              timing.tcp_user_timeout_ms);
  }
};

}  // namespace

Dialer& tcp_dialer() {
  static TcpDialer dialer;
  return dialer;
}

}  // namespace rig::remote
