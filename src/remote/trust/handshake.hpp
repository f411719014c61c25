// The handshake that opens every connection of a job: each end proves it holds the job's key, the
// dialer first, before any other byte is parsed. A pure state machine for either end: it takes the
// bytes that arrive and gives the bytes to send, and knows nothing of sockets or time. The reactor
// drives it and drops a connection that is not done() within handshake_timeout_ms.
//
// docs/protocol.md gives the messages byte by byte; docs/security.md what the proofs protect.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remote/limits.hpp"
#include "remote/trust/mac.hpp"
#include "rig/remote.hpp"

namespace rig::remote {

enum class Role : std::uint8_t { controller = 1, agent = 2 };
std::string_view role_name(Role role) noexcept;  // "controller", "agent"

// A job's identity: 16 random bytes the controller chooses, so that an agent can tell a second
// job's controller from its own even when both hold the same key.
using JobId = std::array<std::uint8_t, job_id_bytes>;
JobId new_job_id();

// A process's identity on the wire, drawn once per process (by the reactor), so a dialer can notice
// a greeting from its own process: an agent that dialed itself, or its own greeting reflected back.
using InstanceId = std::array<std::uint8_t, instance_id_bytes>;
InstanceId new_instance_id();

// The listener's one-byte answer to a proof.
enum class Verdict : std::uint8_t {
  proven = 0,       // followed by the listener's own MAC
  wrong_key = 1,    // the proof does not verify under the listener's key
  another_job = 2,  // the proof verifies, but the listener serves another job
  no_job = 3,       // an agent dialed before any controller started a job at the listener
  malformed = 4,    // the proof could not be parsed
  ending = 5,       // the listener is ending its job: it turns the dialer away, proof or not
};

// The greeting's first 12 bytes are the same in every protocol version, so any version can read
// another's and name it: 8 bytes of magic, then the u32 version.
inline constexpr std::array<std::uint8_t, 8> greeting_magic = {'r', 'i', 'g', '-',
                                                               'j', 'o', 'b', '\0'};
inline constexpr std::size_t greeting_prefix_bytes = greeting_magic.size() + 4;
// Version 1 then adds the listener's role, its instance id and its nonce.
inline constexpr std::size_t greeting_bytes =
    greeting_prefix_bytes + 1 + instance_id_bytes + nonce_bytes;
// A proof's body: version, role, job id, nonce, two names (u32 length + bytes each), MAC.
inline constexpr std::size_t proof_body_bytes_max =
    4 + 1 + job_id_bytes + nonce_bytes + 2 * (4 + name_bytes_max) + mac_bytes;
// A reply's body: the verdict, then the MAC when it is `proven`.
inline constexpr std::size_t reply_body_bytes_max = 1 + mac_bytes;

// Who is at the other end of a proven connection.
struct Peer {
  Role role;
  std::string name;      // how this process names the peer: "controller", "HOST:PORT", a NAME
  JobId job;             // the job the connection belongs to
  std::string our_name;  // how the peer names this process
};

struct DialerConfig {
  Role role;                  // this process's role
  std::string name;           // this process's name in the job ("controller" or the agent's)
  JobId job;                  // the job this process belongs to
  std::string listener_name;  // the name this process uses for the listener
  InstanceId instance;        // this process's
  std::uint32_t version = protocol_version;  // only tests of a version mismatch change it
};

struct ListenerConfig {
  InstanceId instance;                       // this process's
  std::uint32_t version = protocol_version;  // only tests of a version mismatch change it
};

// One end of one connection's handshake.
//
//   listener: awaiting_proof -> verified -> (admit) -> proven | refused
//   dialer:   awaiting_greeting -> awaiting_reply -> proven | refused
//
// Anything malformed, a wrong proof or the end of input refuses with a reason (why()); nothing a
// peer sends can make it throw or crash. A dialer's reasons are written to follow the listener's
// name and ": " ("holds another key", "serves another job", "speaks protocol version 2, this
// process speaks 1"); a listener's to follow the dialer's address.
//
// Owner: the connection it belongs to; one thread (the loop). It holds the MAC keys derived from
// the job's key, wiped when it is destroyed; the job's key itself is only read during construction.
class Handshake {
 public:
  enum class State : std::uint8_t {
    awaiting_greeting,  // dialer
    awaiting_proof,     // listener; its greeting is in the output
    verified,           // listener: the dialer proved the key; admit() decides
    awaiting_reply,     // dialer; its proof is in the output
    proven,
    refused,
  };

  // Raise std::invalid_argument for a name that is empty or over name_bytes_max.
  static Handshake dialer(const Key& key, DialerConfig config);
  static Handshake listener(const Key& key, ListenerConfig config);

  Handshake(Handshake&&) noexcept = default;
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;
  Handshake& operator=(Handshake&&) = delete;

  // Takes the handshake's bytes from the front of `bytes` and returns how many it took. It takes
  // none once verified or done: what follows a proven handshake belongs to the frame decoder.
  std::size_t feed(std::span<const std::uint8_t> bytes);
  // The peer ended its side of the connection: refuses, unless already done.
  void end_of_input();
  // Listener, once verified: accepts the dialer into `serving`, the job this agent serves now (none
  // yet: a controller's proof starts one, peer().job), or refuses it as another job's. The decision
  // is the caller's moment, not the proof's, so that of two controllers racing for an idle agent
  // only the first admitted wins. Raises std::invalid_argument in any other state.
  void admit(const std::optional<JobId>& serving);
  // Listener, still awaiting the proof: refuses the dialer as one that came while this agent ends
  // its job (Verdict::ending, which the dialer reads after its proof, whenever that leaves), so
  // that it hears why rather than a connection cut mid-handshake. std::invalid_argument in any
  // other state.
  void turn_away();

  // The bytes to send now; the caller sends them in order, also after a refusal (which carries the
  // verdict), then closes a refused connection.
  std::vector<std::uint8_t> take_output();

  State state() const noexcept { return state_; }
  bool done() const noexcept { return state_ == State::proven || state_ == State::refused; }
  // Once verified or proven; std::invalid_argument before.
  const Peer& peer() const;
  // Once refused; std::invalid_argument before.
  const std::string& why() const;
  // Dialer: the instance id the listener's greeting carried, once the whole greeting arrived (a
  // proof is not needed for it: two connections that greet with one id reach one process).
  const std::optional<InstanceId>& greeting_instance() const noexcept { return greeting_instance_; }
  // Whether this is the listener's end.
  bool listening() const noexcept { return !dialing_; }
  // Listener, once refused: the verdict it sent (none when the dialer left before one was due).
  const std::optional<Verdict>& verdict_sent() const noexcept { return verdict_sent_; }

 private:
  // Which piece of which message `pending_` is collecting.
  enum class Part : std::uint8_t {
    greeting_prefix,
    greeting_rest,
    proof_length,
    proof_body,
    reply_length,
    reply_body,
    none,
  };

  Handshake(const Key& key, bool dialing, DialerConfig dialer, ListenerConfig listener);
  void expect(Part part, std::size_t bytes);
  void step();
  void on_greeting_prefix();
  void on_greeting_rest();
  void on_proof_length();
  void on_proof_body();
  void on_reply_length();
  void on_reply_body();
  void send_proof();
  // Listener: sends `verdict` (and its MAC when proven) and ends.
  void reply(Verdict verdict, std::string why);
  void refuse(std::string why);

  MacKeys keys_;
  bool dialing_;
  std::optional<Verdict> verdict_sent_;
  DialerConfig dialer_;
  ListenerConfig listener_;
  State state_;
  Part part_ = Part::none;
  std::size_t want_ = 0;
  std::uint32_t length_ = 0;
  std::vector<std::uint8_t> pending_;     // the piece being collected
  std::vector<std::uint8_t> transcript_;  // every byte either end sent, in order
  std::vector<std::uint8_t> output_;
  Peer peer_{};
  std::string why_;
  std::optional<InstanceId> greeting_instance_;
};

}  // namespace rig::remote
