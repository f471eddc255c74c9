#include "runtime/common/auth/keyed_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <limits>

namespace dadt {
namespace auth {

StatusOr<std::string> NewNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    return InternalError("no random bytes for a handshake nonce (OpenSSL RAND_bytes failed)");
  }
  return nonce;
}

std::string Proof(std::string_view secret, std::string_view label, std::string_view challenge,
                  std::string_view answer) {
  std::string message;
  message.reserve(label.size() + 1 + challenge.size() + answer.size());
  message.append(label);
  message.push_back('\0');  // no label is a prefix of another's message
  message.append(challenge);
  message.append(answer);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // Secrets are short (dadtrun draws 64 hex digits); one too long for an int cannot occur.
  const int key_length = static_cast<int>(std::min<size_t>(secret.size(), std::numeric_limits<int>::max()));
  HMAC(EVP_sha256(), secret.data(), key_length, reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool ProofMatches(std::string_view presented, std::string_view expected) {
  // The length of a proof is public (kProofBytes): comparing it first reveals nothing.
  return presented.size() == expected.size() && !expected.empty() &&
         CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) == 0;
}

}  // namespace auth
}  // namespace dadt
