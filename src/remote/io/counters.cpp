#include "remote/io/counters.hpp"

namespace rig::remote {

void ConnectionCounters::clear() noexcept {
  for (Role* r : {&controller, &agent}) {
    r->sent_bytes.store(0);
    r->received_bytes.store(0);
    r->sent_messages.store(0);
    r->received_messages.store(0);
    r->last_received_ms.store(0);
  }
  for (auto* f : {&handshakes_wrong_key, &handshakes_malformed, &handshakes_timed_out,
                  &connections_refused}) {
    f->store(0);
  }
}

}  // namespace rig::remote
