// Keyed proofs (runtime/common/auth/keyed_proof.h): the HMAC the Python side computes too, and a
// proof that changes with every input it binds.
#include "runtime/common/auth/keyed_proof.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace dadt {
namespace auth {
namespace {

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(KeyedProofTest, IsTheHmacThePythonSideComputes) {
  // python3 -c "import hmac, hashlib; print(hmac.new(b'job-secret',
  //   b'dadt test label\x00' + b'A' * 32 + b'B' * 32, hashlib.sha256).hexdigest())"
  // (frameworks/python/dadt/_rendezvous_wire.py proves itself to dadtrun's store this way.)
  EXPECT_EQ(Hex(Proof("job-secret", "dadt test label", std::string(32, 'A'), std::string(32, 'B'))),
            "0932254d2454f80c6fc67439557660903c868ad8dfd88046e9b78199e5911ab5");
}

TEST(KeyedProofTest, ChangesWithTheSecretTheLabelAndEitherNonce) {
  const std::string a(kNonceBytes, 'a'), b(kNonceBytes, 'b');
  const std::string base = Proof("s", "dadt x hello", a, b);
  EXPECT_EQ(base.size(), kProofBytes);
  EXPECT_EQ(base, Proof("s", "dadt x hello", a, b));
  std::set<std::string> variants = {base,
                                    Proof("t", "dadt x hello", a, b),
                                    Proof("s", "dadt x welcome", a, b),
                                    Proof("s", "dadt x hello", b, a),
                                    Proof("s", "dadt x hello", a, a)};
  EXPECT_EQ(variants.size(), 5u) << "a proof must bind the secret, the label and both nonces";
}

TEST(KeyedProofTest, MatchesOnlyTheSameBytes) {
  const std::string p = Proof("s", "l", "x", "y");
  EXPECT_TRUE(ProofMatches(p, p));
  std::string flipped = p;
  flipped[kProofBytes - 1] ^= 1;
  EXPECT_FALSE(ProofMatches(flipped, p));
  EXPECT_FALSE(ProofMatches(p.substr(0, 16), p));
  EXPECT_FALSE(ProofMatches("", ""));
}

TEST(KeyedProofTest, NoncesAreFreshAndFullLength) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    StatusOr<std::string> n = NewNonce();
    ASSERT_TRUE(n.ok()) << n.status().message();
    EXPECT_EQ(n->size(), kNonceBytes);
    seen.insert(*n);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace auth
}  // namespace dadt
