#include "remote/trust/handshake.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "remote/trust/random.hpp"
#include "remote/wire/wire.hpp"

namespace rig::remote {

namespace {

void check_name(std::string_view what, const std::string& name) {
  if (name.empty() || name.size() > name_bytes_max)
    throw std::invalid_argument("rig: handshake " + std::string(what) + " of " +
                                std::to_string(name.size()) + " bytes; a name has 1 to " +
                                std::to_string(name_bytes_max));
}

std::string version_mismatch(std::uint32_t theirs, std::uint32_t ours) {
  return "speaks protocol version " + std::to_string(theirs) + ", this process speaks " +
         std::to_string(ours);
}

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  Writer(out).u32(v);
}

}  // namespace

std::string_view role_name(Role role) noexcept {
  return role == Role::controller ? "controller" : "agent";
}

JobId new_job_id() {
  JobId id;
  random_bytes(id);
  return id;
}

InstanceId new_instance_id() {
  InstanceId id;
  random_bytes(id);
  return id;
}

Handshake::Handshake(const Key& key, bool dialing, DialerConfig dialer, ListenerConfig listener)
    : keys_(key),
      dialing_(dialing),
      dialer_(std::move(dialer)),
      listener_(listener),
      state_(dialing ? State::awaiting_greeting : State::awaiting_proof) {}

Handshake Handshake::dialer(const Key& key, DialerConfig config) {
  check_name("dialer name", config.name);
  check_name("listener name", config.listener_name);
  Handshake h(key, true, std::move(config), ListenerConfig{});
  h.expect(Part::greeting_prefix, greeting_prefix_bytes);
  return h;
}

Handshake Handshake::listener(const Key& key, ListenerConfig config) {
  Handshake h(key, false, DialerConfig{}, config);
  std::array<std::uint8_t, nonce_bytes> nonce;
  random_bytes(nonce);
  std::vector<std::uint8_t> greeting;
  Writer w(greeting);
  w.bytes(greeting_magic);
  w.u32(config.version);
  w.u8(static_cast<std::uint8_t>(Role::agent));  // only agents listen
  w.bytes(config.instance);
  w.bytes(nonce);
  h.transcript_ = greeting;
  h.output_ = std::move(greeting);
  h.expect(Part::proof_length, 4);
  return h;
}

void Handshake::expect(Part part, std::size_t bytes) {
  part_ = part;
  want_ = bytes;
  pending_.clear();
}

std::size_t Handshake::feed(std::span<const std::uint8_t> bytes) {
  std::size_t used = 0;
  while (part_ != Part::none) {
    if (pending_.size() == want_) {
      step();
      continue;
    }
    if (used == bytes.size()) break;
    const std::size_t n = std::min(want_ - pending_.size(), bytes.size() - used);
    pending_.insert(pending_.end(), bytes.begin() + used, bytes.begin() + used + n);
    used += n;
  }
  return used;
}

void Handshake::step() {
  switch (part_) {
    case Part::greeting_prefix:
      return on_greeting_prefix();
    case Part::greeting_rest:
      return on_greeting_rest();
    case Part::proof_length:
      return on_proof_length();
    case Part::proof_body:
      return on_proof_body();
    case Part::reply_length:
      return on_reply_length();
    case Part::reply_body:
      return on_reply_body();
    case Part::none:
      return;
  }
}

void Handshake::on_greeting_prefix() {
  if (!std::equal(greeting_magic.begin(), greeting_magic.end(), pending_.begin()))
    return refuse("does not speak rig's protocol (its first bytes are not a rig greeting)");
  const std::uint32_t version = load_u32(pending_.data() + greeting_magic.size());
  if (version != dialer_.version) return refuse(version_mismatch(version, dialer_.version));
  transcript_.insert(transcript_.end(), pending_.begin(), pending_.end());
  expect(Part::greeting_rest, greeting_bytes - greeting_prefix_bytes);
}

void Handshake::on_greeting_rest() {
  Reader r("greeting", pending_);
  const std::uint8_t role = r.u8("role");
  const auto instance = r.array<instance_id_bytes>("instance id");
  // The nonce counts only as part of the transcript, which every MAC covers.
  r.bytes("nonce", nonce_bytes);
  // The part's size is exact, so every read above succeeded.
  if (role == static_cast<std::uint8_t>(Role::controller))
    return refuse("malformed handshake: greeting: from a controller, and only agents listen");
  if (role != static_cast<std::uint8_t>(Role::agent))
    return refuse("malformed handshake: greeting: role " + std::to_string(role) + " unknown");
  if (instance == dialer_.instance)
    return refuse("is this process itself (the greeting carries this process's instance id)");
  greeting_instance_ = instance;
  transcript_.insert(transcript_.end(), pending_.begin(), pending_.end());
  send_proof();
}

void Handshake::send_proof() {
  std::array<std::uint8_t, nonce_bytes> nonce;
  random_bytes(nonce);
  std::vector<std::uint8_t> proof;
  Writer w(proof);
  const std::size_t body = 4 + 1 + job_id_bytes + nonce_bytes + 4 + dialer_.name.size() + 4 +
                           dialer_.listener_name.size() + mac_bytes;
  w.u32(static_cast<std::uint32_t>(body));
  w.u32(dialer_.version);
  w.u8(static_cast<std::uint8_t>(dialer_.role));
  w.bytes(dialer_.job);
  w.bytes(nonce);
  w.string(dialer_.name);
  w.string(dialer_.listener_name);
  transcript_.insert(transcript_.end(), proof.begin(), proof.end());
  const Mac mac = keys_.prove(Direction::dialer, transcript_);
  w.bytes(mac);
  transcript_.insert(transcript_.end(), mac.begin(), mac.end());
  output_.insert(output_.end(), proof.begin(), proof.end());
  state_ = State::awaiting_reply;
  expect(Part::reply_length, 4);
}

void Handshake::on_proof_length() {
  length_ = load_u32(pending_.data());
  transcript_.insert(transcript_.end(), pending_.begin(), pending_.end());
  if (length_ > proof_body_bytes_max)
    return reply(Verdict::malformed, "malformed handshake: proof length " +
                                         std::to_string(length_) + " over the maximum " +
                                         std::to_string(proof_body_bytes_max));
  expect(Part::proof_body, length_);
}

void Handshake::on_proof_body() {
  Reader r("proof", pending_);
  const std::uint32_t version = r.u32("version");
  const std::uint8_t role = r.u8("role");
  const auto job = r.array<job_id_bytes>("job id");
  r.bytes("nonce", nonce_bytes);
  std::string name = r.string("name", name_bytes_max);
  std::string listener_name = r.string("listener name", name_bytes_max);
  const auto mac_at = r.offset();
  r.bytes("MAC", mac_bytes);
  r.finish();
  if (r.ok() && version != listener_.version)
    r.fail("version " + std::to_string(version) + ", but the greeting offered " +
           std::to_string(listener_.version));
  if (r.ok() && role != static_cast<std::uint8_t>(Role::controller) &&
      role != static_cast<std::uint8_t>(Role::agent))
    r.fail("role " + std::to_string(role) + " unknown");
  if (r.ok() && name.empty()) r.fail("name is empty");
  if (r.ok() && listener_name.empty()) r.fail("listener name is empty");
  if (!r.ok()) return reply(Verdict::malformed, "malformed handshake: " + r.error());

  transcript_.insert(transcript_.end(), pending_.begin(), pending_.end());
  const std::size_t mac_start = transcript_.size() - pending_.size() + mac_at;
  const std::span<const std::uint8_t> proven_bytes(transcript_.data(), mac_start);
  const std::span<const std::uint8_t, mac_bytes> mac(transcript_.data() + mac_start, mac_bytes);
  if (!keys_.verify(Direction::dialer, proven_bytes, mac))
    return reply(Verdict::wrong_key, "holds another key");

  peer_ = Peer{static_cast<Role>(role), std::move(name), job, std::move(listener_name)};
  state_ = State::verified;
  expect(Part::none, 0);
}

void Handshake::admit(const std::optional<JobId>& serving) {
  if (state_ != State::verified)
    throw std::invalid_argument("rig: Handshake::admit outside the verified state");
  if (serving && *serving == peer_.job) return reply(Verdict::proven, {});
  if (serving) return reply(Verdict::another_job, "belongs to another job");
  if (peer_.role == Role::controller) return reply(Verdict::proven, {});
  reply(Verdict::no_job, "dialed as an agent before a controller started a job here");
}

void Handshake::turn_away() {
  if (state_ != State::awaiting_proof)
    throw std::invalid_argument("rig: Handshake::turn_away outside the awaiting_proof state");
  reply(Verdict::ending, "turned away: this agent is ending its job");
}

void Handshake::reply(Verdict verdict, std::string why) {
  const bool proven = verdict == Verdict::proven;
  std::vector<std::uint8_t> head;
  put_u32(head, proven ? 1 + mac_bytes : 1);
  head.push_back(static_cast<std::uint8_t>(verdict));
  transcript_.insert(transcript_.end(), head.begin(), head.end());
  output_.insert(output_.end(), head.begin(), head.end());
  if (!proven) {
    verdict_sent_ = verdict;
    return refuse(std::move(why));
  }
  const Mac mac = keys_.prove(Direction::listener, transcript_);
  output_.insert(output_.end(), mac.begin(), mac.end());
  state_ = State::proven;
  expect(Part::none, 0);
}

void Handshake::on_reply_length() {
  length_ = load_u32(pending_.data());
  transcript_.insert(transcript_.end(), pending_.begin(), pending_.end());
  if (length_ > reply_body_bytes_max)
    return refuse("malformed handshake: reply length " + std::to_string(length_) +
                  " over the maximum " + std::to_string(reply_body_bytes_max));
  expect(Part::reply_body, length_);
}

void Handshake::on_reply_body() {
  Reader r("reply", pending_);
  const std::uint8_t code = r.u8("verdict");
  std::span<const std::uint8_t> mac;
  if (code == static_cast<std::uint8_t>(Verdict::proven)) mac = r.bytes("MAC", mac_bytes);
  if (!r.finish()) return refuse("malformed handshake: " + r.error());
  // The listener's MAC covers everything before it: the greeting, the proof and the reply so far.
  transcript_.push_back(code);
  switch (code) {
    case static_cast<std::uint8_t>(Verdict::proven):
      if (!keys_.verify(Direction::listener, transcript_,
                        std::span<const std::uint8_t, mac_bytes>(mac.data(), mac_bytes)))
        return refuse("holds another key");
      peer_ = Peer{Role::agent, dialer_.listener_name, dialer_.job, dialer_.name};
      state_ = State::proven;
      return expect(Part::none, 0);
    case static_cast<std::uint8_t>(Verdict::wrong_key):
      return refuse("holds another key");
    case static_cast<std::uint8_t>(Verdict::another_job):
      return refuse("serves another job");
    case static_cast<std::uint8_t>(Verdict::no_job):
      return refuse("serves no job yet");
    case static_cast<std::uint8_t>(Verdict::malformed):
      return refuse("refused this process's proof as malformed");
    case static_cast<std::uint8_t>(Verdict::ending):
      return refuse("was ending a job and turned this connection away");
    default:
      return refuse("malformed handshake: reply: verdict " + hex_byte(code) + " unknown");
  }
}

void Handshake::refuse(std::string why) {
  why_ = std::move(why);
  state_ = State::refused;
  expect(Part::none, 0);
}

void Handshake::end_of_input() {
  if (!done()) refuse("closed the connection during the handshake");
}

std::vector<std::uint8_t> Handshake::take_output() {
  return std::exchange(output_, {});
}

const Peer& Handshake::peer() const {
  if (state_ != State::verified && state_ != State::proven)
    throw std::invalid_argument("rig: Handshake::peer before the peer proved the key");
  return peer_;
}

const std::string& Handshake::why() const {
  if (state_ != State::refused)
    throw std::invalid_argument("rig: Handshake::why on a handshake not refused");
  return why_;
}

}  // namespace rig::remote
