// Keyed proofs: how each end of a connection shows that it knows the job secret without sending
// it (docs/architecture.md, "Authentication").
//
// A challenge-response over fresh nonces: the side that accepts sends a nonce; the side that
// dials answers with a nonce of its own and Proof(secret, label, accepter's nonce, its nonce);
// the accepter checks it and answers Proof(secret, other label, dialler's nonce, its nonce), which
// the dialler checks. A proof is HMAC-SHA256 keyed by the secret over the label and both nonces,
// so it is worthless for any other connection (other nonces), direction or purpose (other label),
// and an eavesdropper learns nothing it could replay. Labels name the protocol, the direction and,
// where one connection stands for a rank, the ranks ("dadt control hello 3").
//
//   const std::string mine = *auth::NewNonce();
//   send(mine); const std::string theirs = recv(); const std::string proof = recv();
//   if (!auth::ProofMatches(proof, auth::Proof(secret, "dadt x hello", mine, theirs))) refuse();
//
// Thread-safe: no state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace dadt {
namespace auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256

// kNonceBytes from the operating system's random source (OpenSSL's RAND_bytes); an error only
// when it has none.
StatusOr<std::string> NewNonce();

// HMAC-SHA256 keyed by `secret` over `label`, a zero byte, `challenge` and `answer`: kProofBytes.
std::string Proof(std::string_view secret, std::string_view label, std::string_view challenge,
                  std::string_view answer);

// Whether `presented` equals `expected`, in time that does not depend on where they differ.
bool ProofMatches(std::string_view presented, std::string_view expected);

}  // namespace auth
}  // namespace dadt
