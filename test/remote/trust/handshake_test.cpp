// The handshake, both ends in memory: success for each kind of connection, every refusal with the
// reason each end gives, replay and reflection, and bytes cut short or made up at every step.
#include "remote/trust/handshake.hpp"

#include <algorithm>
#include <climits>
#include <random>
#include <stdexcept>

#include "remote/support.hpp"
#include "remote/wire/wire.hpp"

using namespace rig::remote;
using rig::remote::test::bytes_of;
using rig::remote::test::cat;
using rig::remote::test::le32;
using Octets = std::vector<std::uint8_t>;
using State = Handshake::State;

namespace {

const Key& the_key() {
  static const Key k = key("0123456789abcdef0123456789abcdef").value();
  return k;
}
const Key& other_key() {
  static const Key k = key("0123456789abcdef0123456789abcdeF").value();
  return k;
}

const InstanceId listener_instance = new_instance_id();
const InstanceId dialer_instance = new_instance_id();
const JobId job = new_job_id();
const JobId other_job = new_job_id();

DialerConfig controller() {
  return {Role::controller, "controller", job, "h100-b", dialer_instance};
}
DialerConfig agent() {
  return {Role::agent, "h100-a", job, "h100-b", dialer_instance};
}

Handshake listener(const Key& k = the_key()) {
  return Handshake::listener(k, {listener_instance});
}

// Passes `bytes` to `h` in pieces of `piece` bytes; a handshake takes all it is given until done.
void deliver(Handshake& h, const Octets& bytes, std::size_t piece) {
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    const auto chunk = std::span(bytes).subspan(at, std::min(piece, bytes.size() - at));
    const std::size_t used = h.feed(chunk);
    if (!h.done() && h.state() != State::verified) CHECK(used == chunk.size());
  }
}

// Runs both ends against each other until neither has anything left to say; the listener admits the
// dialer into `serving` once it has verified it. An end that refuses closes its connection, which
// the other end sees as the end of its input.
void run(Handshake& d, Handshake& l, const std::optional<JobId>& serving,
         std::size_t piece = SIZE_MAX) {
  for (;;) {
    const Octets to_dialer = l.take_output();
    deliver(d, to_dialer, piece);
    const Octets to_listener = d.take_output();
    deliver(l, to_listener, piece);
    const bool admitting = l.state() == State::verified;
    if (admitting) l.admit(serving);
    if (to_dialer.empty() && to_listener.empty() && !admitting) break;
  }
  if (d.state() == State::refused) l.end_of_input();
  if (l.state() == State::refused) d.end_of_input();
}

// The dialer's proof in answer to `l`'s greeting.
struct Exchange {
  Octets greeting;
  Octets proof;
};
Exchange greet_and_prove(Handshake& d, Handshake& l) {
  Exchange e{l.take_output(), {}};
  REQUIRE(d.feed(e.greeting) == e.greeting.size());
  e.proof = d.take_output();
  REQUIRE(d.state() == State::awaiting_reply);
  return e;
}

// A proof body without its MAC, fields as given.
Octets proof_fields(std::uint32_t version, std::uint8_t role, const JobId& j, std::string_view name,
                    std::string_view listener_name) {
  Octets out;
  Writer w(out);
  w.u32(version);
  w.u8(role);
  w.bytes(j);
  Octets nonce(nonce_bytes, 0x5a);
  w.bytes(nonce);
  w.string(name);
  w.string(listener_name);
  return out;
}

// A whole proof for `greeting`: length, fields, and a MAC by `k` in `direction`.
Octets signed_proof(const Key& k, Direction direction, const Octets& greeting,
                    const Octets& fields) {
  const Octets head = cat({le32(static_cast<std::uint32_t>(fields.size() + mac_bytes)), fields});
  const Mac mac = MacKeys(k).prove(direction, cat({greeting, head}));
  return cat({head, mac});
}

// A proof of `length` declared bytes carrying `body`, for refusals before the MAC matters.
Octets proof_with_body(const Octets& body) {
  return cat({le32(static_cast<std::uint32_t>(body.size())), body});
}

// The listener's reply after it read `proof`, and the reason it refused, if it did.
struct Answer {
  Octets reply;
  std::string why;
};
Answer answer(const Octets& proof) {
  auto l = listener();
  const Octets greeting = l.take_output();
  (void)greeting;
  l.feed(proof);
  if (l.state() == State::verified) l.admit(std::nullopt);
  return {l.take_output(), l.state() == State::refused ? l.why() : ""};
}

// What a dialer says to a listener greeting `greeting` and then replying `reply`.
std::string dialer_refusal(const Octets& greeting, const Octets& reply) {
  auto d = Handshake::dialer(the_key(), controller());
  d.feed(greeting);
  d.feed(reply);
  d.end_of_input();
  REQUIRE(d.state() == State::refused);
  return d.why();
}

Octets greeting_with(std::uint32_t version, std::uint8_t role, const InstanceId& instance) {
  Octets out;
  Writer w(out);
  w.bytes(greeting_magic);
  w.u32(version);
  w.u8(role);
  w.bytes(instance);
  w.bytes(Octets(nonce_bytes, 7));
  return out;
}

const Octets refused_malformed = cat({le32(1), Octets{4}});

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a controller and an idle agent prove the key to each other") {
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    CHECK(d.state() == State::awaiting_greeting);
    CHECK(l.state() == State::awaiting_proof);
    CHECK_FALSE(d.done());
    run(d, l, std::nullopt);
    REQUIRE(d.state() == State::proven);
    REQUIRE(l.state() == State::proven);
    CHECK(d.done());
    CHECK(l.done());

    CHECK(l.peer().role == Role::controller);
    CHECK(l.peer().name == "controller");
    CHECK(l.peer().job == job);
    CHECK(l.peer().our_name == "h100-b");
    CHECK(d.peer().role == Role::agent);
    CHECK(d.peer().name == "h100-b");
    CHECK(d.peer().job == job);
    CHECK(d.peer().our_name == "controller");
    CHECK(role_name(Role::controller) == "controller");
    CHECK(role_name(Role::agent) == "agent");
  }

  TEST_CASE("agents of one job, and a controller's second connection, are admitted") {
    for (auto config : {agent(), controller()}) {
      auto l = listener();
      auto d = Handshake::dialer(the_key(), config);
      run(d, l, job);
      CHECK(d.state() == State::proven);
      CHECK(l.state() == State::proven);
      CHECK(l.peer().role == config.role);
      CHECK(l.peer().name == config.name);
    }
  }

  TEST_CASE("the handshake works with its bytes delivered one at a time") {
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    run(d, l, std::nullopt, 1);
    CHECK(d.state() == State::proven);
    CHECK(l.state() == State::proven);
  }

  TEST_CASE("the greeting and the proof, byte by byte") {
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    const auto e = greet_and_prove(d, l);
    REQUIRE(e.greeting.size() == 61);
    CHECK(Octets(e.greeting.begin(), e.greeting.begin() + 13) ==
          cat({Octets{'r', 'i', 'g', '-', 'j', 'o', 'b', 0}, le32(protocol_version), Octets{2}}));
    CHECK(Octets(e.greeting.begin() + 13, e.greeting.begin() + 29) ==
          Octets(listener_instance.begin(), listener_instance.end()));

    // length, the version, role 1 (controller), job id, nonce, "controller", "h100-b", MAC
    const std::size_t body = 4 + 1 + 16 + 32 + 4 + 10 + 4 + 6 + 32;
    REQUIRE(e.proof.size() == 4 + body);
    CHECK(Octets(e.proof.begin(), e.proof.begin() + 9) ==
          cat({le32(body), le32(protocol_version), Octets{1}}));
    CHECK(Octets(e.proof.begin() + 9, e.proof.begin() + 25) == Octets(job.begin(), job.end()));
    CHECK(Octets(e.proof.begin() + 57, e.proof.begin() + 81) ==
          cat({le32(10), bytes_of("controller"), le32(6), bytes_of("h100-b")}));

    REQUIRE(l.feed(e.proof) == e.proof.size());
    l.admit(std::nullopt);
    const Octets reply = l.take_output();
    REQUIRE(reply.size() == 4 + 1 + 32);
    CHECK(Octets(reply.begin(), reply.begin() + 5) == cat({le32(33), Octets{0}}));
  }

  TEST_CASE("each connection draws fresh nonces, so no two proofs are alike") {
    auto l1 = listener();
    auto l2 = listener();
    const Octets g1 = l1.take_output();
    const Octets g2 = l2.take_output();
    CHECK(Octets(g1.begin(), g1.begin() + 29) == Octets(g2.begin(), g2.begin() + 29));
    CHECK(Octets(g1.begin() + 29, g1.end()) != Octets(g2.begin() + 29, g2.end()));

    auto d1 = Handshake::dialer(the_key(), controller());
    auto d2 = Handshake::dialer(the_key(), controller());
    d1.feed(g1);
    d2.feed(g1);
    const Octets p1 = d1.take_output();
    const Octets p2 = d2.take_output();
    CHECK(Octets(p1.begin() + 25, p1.begin() + 57) != Octets(p2.begin() + 25, p2.begin() + 57));
    CHECK(Octets(p1.end() - 32, p1.end()) != Octets(p2.end() - 32, p2.end()));
  }

  TEST_CASE("the key never crosses the wire") {
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    const auto e = greet_and_prove(d, l);
    l.feed(e.proof);
    l.admit(std::nullopt);
    const Octets wire = cat({e.greeting, e.proof, l.take_output()});
    const auto k = detail::key_bytes(the_key());
    // Not the key, nor any 8-byte piece of it.
    for (std::size_t at = 0; at + 8 <= k.size(); ++at)
      CHECK(std::search(wire.begin(), wire.end(), k.begin() + at, k.begin() + at + 8) ==
            wire.end());
  }

  TEST_CASE("a wrong key is refused at both ends, each saying the other holds another key") {
    SUBCASE("the listener holds another key") {
      auto l = listener(other_key());
      auto d = Handshake::dialer(the_key(), controller());
      run(d, l, std::nullopt);
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "holds another key");
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "holds another key");
    }
    SUBCASE("a listener that proves under another key after accepting") {
      // A listener without the key that answers "proven" anyway: the dialer checks its MAC.
      auto l = listener();
      auto d = Handshake::dialer(the_key(), controller());
      const auto e = greet_and_prove(d, l);
      auto impostor = listener(other_key());
      (void)impostor.take_output();
      const Octets transcript = cat({e.greeting, e.proof, le32(33), Octets{0}});
      const Mac mac = MacKeys(other_key()).prove(Direction::listener, transcript);
      d.feed(cat({le32(33), Octets{0}, Octets(mac.begin(), mac.end())}));
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "holds another key");
    }
  }

  TEST_CASE("another protocol version is named at the dialer") {
    SUBCASE("the listener speaks a newer version") {
      auto l = Handshake::listener(the_key(), {listener_instance, protocol_version + 1});
      auto d = Handshake::dialer(the_key(), controller());
      run(d, l, std::nullopt);
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "speaks protocol version " + std::to_string(protocol_version + 1) +
                           ", this process speaks " + std::to_string(protocol_version));
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "closed the connection during the handshake");
    }
    SUBCASE("the dialer speaks a newer version") {
      auto config = controller();
      config.version = protocol_version + 1;
      auto l = listener();
      auto d = Handshake::dialer(the_key(), config);
      run(d, l, std::nullopt);
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "speaks protocol version " + std::to_string(protocol_version) +
                           ", this process speaks " + std::to_string(protocol_version + 1));
    }
    SUBCASE("a version-7 greeting is named from its fixed prefix alone") {
      CHECK(dialer_refusal(cat({Octets(greeting_magic.begin(), greeting_magic.end()), le32(7)}),
                           {}) ==
            "speaks protocol version 7, this process speaks " + std::to_string(protocol_version));
    }
  }

  TEST_CASE("an agent that serves another job refuses a proven dialer") {
    for (auto config : {controller(), agent()}) {
      auto l = listener();
      auto d = Handshake::dialer(the_key(), config);
      run(d, l, other_job);
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "belongs to another job");
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "serves another job");
    }
  }

  TEST_CASE("an agent that serves no job yet refuses another agent") {
    auto l = listener();
    auto d = Handshake::dialer(the_key(), agent());
    run(d, l, std::nullopt);
    REQUIRE(l.state() == State::refused);
    CHECK(l.why() == "dialed as an agent before a controller started a job here");
    REQUIRE(d.state() == State::refused);
    CHECK(d.why() == "serves no job yet");
  }

  TEST_CASE("an agent that dials itself refuses its own greeting and sends nothing") {
    auto l = listener();
    auto config = agent();
    config.instance = listener_instance;
    auto d = Handshake::dialer(the_key(), config);
    d.feed(l.take_output());
    REQUIRE(d.state() == State::refused);
    CHECK(d.why() == "is this process itself (the greeting carries this process's instance id)");
    CHECK(d.take_output().empty());
  }

  TEST_CASE("a recorded proof replayed to a new listener is refused") {
    auto l1 = listener();
    auto d1 = Handshake::dialer(the_key(), controller());
    const auto e = greet_and_prove(d1, l1);
    l1.feed(e.proof);
    l1.admit(std::nullopt);
    const Octets reply = l1.take_output();
    d1.feed(reply);
    REQUIRE(d1.state() == State::proven);

    // The proof covers the first listener's nonce, so a second listener rejects it.
    auto l2 = listener();
    (void)l2.take_output();
    CHECK(l2.feed(e.proof) == e.proof.size());
    REQUIRE(l2.state() == State::refused);
    CHECK(l2.why() == "holds another key");
    CHECK(l2.take_output() == cat({le32(1), Octets{1}}));

    // And the recorded reply covers the first dialer's nonce, so a second dialer rejects it.
    auto l3 = listener();
    auto d2 = Handshake::dialer(the_key(), controller());
    greet_and_prove(d2, l3);
    d2.feed(reply);
    REQUIRE(d2.state() == State::refused);
    CHECK(d2.why() == "holds another key");
  }

  TEST_CASE("a proof reflected into the other direction is refused") {
    SUBCASE("a listener that echoes the dialer's own MAC") {
      auto l = listener();
      auto d = Handshake::dialer(the_key(), controller());
      const auto e = greet_and_prove(d, l);
      d.feed(cat({le32(33), Octets{0}, Octets(e.proof.end() - 32, e.proof.end())}));
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "holds another key");
    }
    SUBCASE("a dialer's proof made with the listener's label") {
      const Octets fields = proof_fields(protocol_version, 1, job, "controller", "h100-b");
      auto control = listener();
      const Octets greeting = control.take_output();
      control.feed(signed_proof(the_key(), Direction::dialer, greeting, fields));
      CHECK(control.state() == State::verified);  // the same proof under the right label holds

      auto l = listener();
      const Octets g = l.take_output();
      l.feed(signed_proof(the_key(), Direction::listener, g, fields));
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "holds another key");
    }
    SUBCASE("a listener's greeting relayed to a dialer of the same process") {
      // Without the instance check, that dialer would prove the key for the relayer.
      auto l = listener();
      auto config = agent();
      config.instance = listener_instance;
      auto d = Handshake::dialer(the_key(), config);
      d.feed(l.take_output());
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "is this process itself (the greeting carries this process's instance id)");
    }
    SUBCASE("a listener's own messages sent back to it") {
      auto l = listener();
      const Octets greeting = l.take_output();
      l.feed(greeting);
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "malformed handshake: proof length 761751922 over the maximum 2141");

      auto d = Handshake::dialer(the_key(), controller());
      auto l2 = listener();
      const auto e = greet_and_prove(d, l2);
      l2.feed(e.proof);
      l2.admit(std::nullopt);
      const Octets reply = l2.take_output();
      CHECK(answer(reply).why ==
            "malformed handshake: proof: nonce (32 bytes at offset 21) past the end of a 33-byte "
            "body");
    }
  }

  TEST_CASE("a malformed proof gets a reason at the listener and a malformed verdict") {
    const auto name = [](std::size_t n) { return std::string(n, 'n'); };
    struct Case {
      Octets proof;
      std::string why;
    };
    const Case cases[] = {
        {le32(proof_body_bytes_max + 1),
         "malformed handshake: proof length 2142 over the maximum 2141"},
        {le32(0xffffffff), "malformed handshake: proof length 4294967295 over the maximum 2141"},
        {proof_with_body({}),
         "malformed handshake: proof: version (4 bytes at offset 0) past the end of a 0-byte body"},
        {proof_with_body(cat({le32(1), Octets{1}})),
         "malformed handshake: proof: job id (16 bytes at offset 5) past the end of a 5-byte body"},
        {proof_with_body(cat({le32(1), Octets{1}, Octets(48, 0), le32(2000)})),
         "malformed handshake: proof: name length 2000 over the maximum 1024"},
        {proof_with_body(cat({le32(1), Octets{1}, Octets(48, 0), le32(20), Octets(5, 'x')})),
         "malformed handshake: proof: name length 20 past the end of a 62-byte body"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 1, job, "controller", "h100-b"), Octets(31, 0)})),
         "malformed handshake: proof: MAC (32 bytes at offset 77) past the end of a 108-byte body"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 1, job, "controller", "h100-b"), Octets(34, 0)})),
         "malformed handshake: proof: 2 trailing bytes"},
        {proof_with_body(cat(
             {proof_fields(protocol_version + 1, 1, job, "controller", "h100-b"), Octets(32, 0)})),
         "malformed handshake: proof: version " + std::to_string(protocol_version + 1) +
             ", but the greeting offered " + std::to_string(protocol_version)},
        {proof_with_body(
             cat({proof_fields(protocol_version, 7, job, "controller", "h100-b"), Octets(32, 0)})),
         "malformed handshake: proof: role 7 unknown"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 0, job, "controller", "h100-b"), Octets(32, 0)})),
         "malformed handshake: proof: role 0 unknown"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 1, job, "", "h100-b"), Octets(32, 0)})),
         "malformed handshake: proof: name is empty"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 1, job, "controller", ""), Octets(32, 0)})),
         "malformed handshake: proof: listener name is empty"},
        {proof_with_body(
             cat({proof_fields(protocol_version, 1, job, "c", name(1025)), Octets(32, 0)})),
         "malformed handshake: proof: listener name length 1025 over the maximum 1024"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.why);
      const Answer a = answer(c.proof);
      CHECK(a.why == c.why);
      CHECK(a.reply == refused_malformed);
    }
    // The largest proof the limits allow is read in full, and then judged on its MAC.
    const Octets biggest = proof_with_body(
        cat({proof_fields(protocol_version, 1, job, name(1024), name(1024)), Octets(32, 0)}));
    REQUIRE(biggest.size() == 4 + proof_body_bytes_max);
    CHECK(answer(biggest).why == "holds another key");

    // A dialer told its proof was malformed says so.
    auto l = listener();
    CHECK(dialer_refusal(l.take_output(), refused_malformed) ==
          "refused this process's proof as malformed");
  }

  TEST_CASE("a dialer refuses a greeting or a reply that is not one, with the reason") {
    auto l = listener();
    const Octets greeting = l.take_output();
    CHECK(dialer_refusal(bytes_of("SSH-2.0-OpenSSH_9.2p1\r\n"), {}) ==
          "does not speak rig's protocol (its first bytes are not a rig greeting)");
    CHECK(dialer_refusal(greeting_with(protocol_version, 1, listener_instance), {}) ==
          "malformed handshake: greeting: from a controller, and only agents listen");
    CHECK(dialer_refusal(greeting_with(protocol_version, 9, listener_instance), {}) ==
          "malformed handshake: greeting: role 9 unknown");
    CHECK(dialer_refusal(greeting, le32(34)) ==
          "malformed handshake: reply length 34 over the maximum 33");
    CHECK(dialer_refusal(greeting, le32(0)) ==
          "malformed handshake: reply: verdict (1 byte at offset 0) past the end of a 0-byte body");
    CHECK(dialer_refusal(greeting, cat({le32(1), Octets{9}})) ==
          "malformed handshake: reply: verdict 0x09 unknown");
    CHECK(dialer_refusal(greeting, cat({le32(1), Octets{0}})) ==
          "malformed handshake: reply: MAC (32 bytes at offset 1) past the end of a 1-byte body");
    CHECK(dialer_refusal(greeting, cat({le32(2), Octets{1, 1}})) ==
          "malformed handshake: reply: 1 trailing byte");
    CHECK(dialer_refusal(greeting, cat({le32(1), Octets{1}})) == "holds another key");
    CHECK(dialer_refusal(greeting, cat({le32(1), Octets{2}})) == "serves another job");
    CHECK(dialer_refusal(greeting, cat({le32(1), Octets{3}})) == "serves no job yet");
    CHECK(dialer_refusal(greeting, cat({le32(33), Octets(33, 0)})) == "holds another key");
  }

  TEST_CASE("input that ends at any point of the handshake refuses it") {
    auto l0 = listener();
    auto d0 = Handshake::dialer(the_key(), controller());
    const auto e = greet_and_prove(d0, l0);
    l0.feed(e.proof);
    l0.admit(std::nullopt);
    const Octets reply = l0.take_output();

    for (std::size_t cut = 0; cut < e.greeting.size(); ++cut) {
      auto d = Handshake::dialer(the_key(), controller());
      d.feed(std::span(e.greeting).first(cut));
      CHECK(d.state() == State::awaiting_greeting);
      d.end_of_input();
      REQUIRE(d.state() == State::refused);
      CHECK(d.why() == "closed the connection during the handshake");
    }
    for (std::size_t cut = 0; cut < e.proof.size(); ++cut) {
      auto l = listener();
      l.feed(std::span(e.proof).first(cut));
      CHECK(l.state() == State::awaiting_proof);
      l.end_of_input();
      REQUIRE(l.state() == State::refused);
      CHECK(l.why() == "closed the connection during the handshake");
    }
    for (std::size_t cut = 0; cut < reply.size(); ++cut) {
      auto l = listener();
      auto d = Handshake::dialer(the_key(), controller());
      greet_and_prove(d, l);
      d.feed(std::span(reply).first(cut));
      CHECK(d.state() == State::awaiting_reply);
      d.end_of_input();
      CHECK(d.why() == "closed the connection during the handshake");
    }
    // A verified dialer that leaves before the verdict.
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    l.feed(greet_and_prove(d, l).proof);
    REQUIRE(l.state() == State::verified);
    l.end_of_input();
    CHECK(l.why() == "closed the connection during the handshake");
    // The end of input after a proven handshake changes nothing: that is the frames' business.
    auto l2 = listener();
    auto d2 = Handshake::dialer(the_key(), controller());
    run(d2, l2, std::nullopt);
    d2.end_of_input();
    CHECK(d2.state() == State::proven);
  }

  TEST_CASE("bytes after the handshake are left for the frame decoder") {
    const Octets frames{1, 0, 0, 0, 0x01, 1, 0, 0, 0, 0x03};
    auto l = listener();
    auto d = Handshake::dialer(the_key(), controller());
    const auto e = greet_and_prove(d, l);
    CHECK(l.feed(cat({e.proof, frames})) == e.proof.size());
    CHECK(l.feed(frames) == 0);  // verified: nothing more is its to take
    l.admit(std::nullopt);
    CHECK(l.feed(frames) == 0);
    const Octets reply = l.take_output();
    CHECK(d.feed(cat({reply, frames})) == reply.size());
    CHECK(d.state() == State::proven);
    CHECK(d.feed(frames) == 0);
  }

  TEST_CASE("misuse raises invalid_argument") {
    auto l = listener();
    CHECK_THROWS_AS(l.admit(std::nullopt), std::invalid_argument);
    CHECK_THROWS_AS((void)l.peer(), std::invalid_argument);
    CHECK_THROWS_AS((void)l.why(), std::invalid_argument);
    auto config = controller();
    config.name = "";
    CHECK_THROWS_WITH_AS(Handshake::dialer(the_key(), config),
                         "rig: handshake dialer name of 0 bytes; a name has 1 to 1024",
                         std::invalid_argument);
    config = controller();
    config.listener_name = std::string(1025, 'x');
    CHECK_THROWS_WITH_AS(Handshake::dialer(the_key(), config),
                         "rig: handshake listener name of 1025 bytes; a name has 1 to 1024",
                         std::invalid_argument);
  }

  TEST_CASE("made-up bytes at any step end in a refusal, never a crash") {
    std::mt19937_64 rng(rig::remote::test::test_seed());
    auto random_bytes = [&](std::size_t n) {
      Octets b(n);
      for (auto& x : b) x = static_cast<std::uint8_t>(rng());
      return b;
    };
    // A small length in front, now and then, so the made-up bytes reach the body parsers.
    auto maybe_framed = [&](Octets b) {
      if (rng() % 2) return b;
      return cat({le32(static_cast<std::uint32_t>(rng() % (b.size() + 2))), b});
    };
    for (int i = 0; i < 3000; ++i) {
      auto l = listener();
      (void)l.take_output();
      l.feed(maybe_framed(random_bytes(rng() % 300)));
      if (l.state() == State::verified) l.admit(std::nullopt);
      l.end_of_input();
      CHECK(l.state() == State::refused);

      auto d = Handshake::dialer(the_key(), controller());
      auto g = listener();
      if (rng() % 2) d.feed(g.take_output());  // then the made-up bytes land on the reply
      d.feed(maybe_framed(random_bytes(rng() % 100)));
      d.end_of_input();
      CHECK(d.state() == State::refused);
    }
  }
}

TEST_CASE("a listener turns a dialer away as its job ends; the dialer reads why after its proof") {
  auto l = listener();
  auto d = Handshake::dialer(the_key(), controller());
  const auto e = greet_and_prove(d, l);
  l.turn_away();
  REQUIRE(l.state() == State::refused);
  CHECK(l.why() == "turned away: this agent is ending its job");
  const Octets verdict = l.take_output();
  CHECK(verdict == Octets{1, 0, 0, 0, static_cast<std::uint8_t>(Verdict::ending)});
  CHECK(d.feed(verdict) == verdict.size());
  REQUIRE(d.state() == State::refused);
  CHECK(d.why() == "was ending a job and turned this connection away");
  // The proof that crossed the verdict is never read; and only a listener awaiting one turns away.
  CHECK_THROWS_AS(l.turn_away(), std::invalid_argument);
  CHECK_THROWS_AS(d.turn_away(), std::invalid_argument);
  (void)e;
}

TEST_CASE("a dialer knows the instance id of the listener's greeting before any proof") {
  auto l = listener();
  auto d = Handshake::dialer(the_key(), controller());
  CHECK_FALSE(d.greeting_instance().has_value());
  const Octets greeting = l.take_output();
  // The id follows the magic, the version and the role.
  const InstanceId sent = [&] {
    InstanceId id;
    std::copy_n(greeting.begin() + greeting_prefix_bytes + 1, id.size(), id.begin());
    return id;
  }();
  d.feed(std::span(greeting).first(greeting.size() - 1));
  CHECK_FALSE(d.greeting_instance().has_value());
  d.feed(std::span(greeting).last(1));
  CHECK(d.greeting_instance() == sent);
}
