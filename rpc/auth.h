// Authentication of parameter-server peers from a shared secret (LOOM_PS_SECRET), both ways:
// each side proves it knows the secret with an HMAC-SHA256 over the other side's fresh random
// nonce, so neither the secret nor a replayable proof ever crosses the wire. The traffic after
// the handshake is authenticated per connection (ZeroMQ gives every TCP connection its own
// routing id, assigned by the server), not encrypted: docs/DISTRIBUTED.md states the model.
#pragma once

#include <string>

namespace loom::rpc {

inline constexpr size_t kNonceBytes = 32;

// A fresh random nonce (libsodium's CSPRNG).
std::string NewNonce();

// HMAC-SHA256 keyed by SHA-256(secret) over role | nonce | trainer_id. role is "server" for the
// server's proof and "trainer" for the trainer's, so one proof can never stand for the other.
std::string Proof(const std::string& secret, const char* role, const std::string& nonce,
                  int trainer_id);

// Constant-time comparison of a received proof with the expected one.
bool ProofMatches(const std::string& got, const std::string& expected);

}  // namespace loom::rpc
