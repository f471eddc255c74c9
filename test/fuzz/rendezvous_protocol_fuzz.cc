#include "test/fuzz/rendezvous_protocol_fuzz.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/common/rendezvous/protocol.h"

namespace dadt {
namespace rendezvous {
namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rendezvous protocol invariant broken: %s\n", what);
    std::abort();
  }
}

void CheckRequest(std::string_view payload) {
  if (payload.size() > kMaxFrameBytes) return;  // never a frame
  Request req;
  if (!DecodeRequest(payload, &req).ok()) return;
  std::string again;
  Require(EncodeRequest(req, &again).ok(), "a decoded request must encode");
  Require(again == payload, "request encode(decode(x)) != x");
  Request twice;
  Require(DecodeRequest(again, &twice).ok(), "a re-encoded request must decode");
  Require(twice.op == req.op && twice.key == req.key && twice.value == req.value,
          "request round trip changed a field");
  std::string sum;
  (void)ApplyAdd(&req.key, req.value, &sum);  // junk numbers are errors, never crashes
}

// The handshake's payloads: whatever decodes has the fields' sizes and re-encodes to itself.
void CheckHandshake(std::string_view payload) {
  std::string nonce, proof;
  if (DecodeHello(payload, &nonce, &proof).ok()) {
    Require(nonce.size() == auth::kNonceBytes && proof.size() == auth::kProofBytes, "hello field sizes");
    Require(EncodeHello(nonce, proof) == payload, "hello encode(decode(x)) != x");
  }
  if (DecodeChallenge(payload, &nonce).ok()) {
    Require(nonce.size() == auth::kNonceBytes, "challenge nonce size");
    Require(EncodeChallenge(nonce) == payload, "challenge encode(decode(x)) != x");
  }
}

void CheckResponse(std::string_view payload) {
  if (payload.size() > kMaxFrameBytes) return;
  Response resp;
  if (!DecodeResponse(payload, &resp).ok()) return;
  std::string again;
  Require(EncodeResponse(resp, &again).ok(), "a decoded response must encode");
  Require(again == payload, "response encode(decode(x)) != x");
}

}  // namespace

void FuzzOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return;
  // The first byte picks how the stream arrives: in chunks of 1..256 bytes, as recv() might.
  const size_t chunk = static_cast<size_t>(data[0]) + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string buffer, payload;
  for (size_t at = 0; at < stream.size(); at += chunk) {
    buffer.append(stream.substr(at, chunk));
    for (;;) {
      StatusOr<bool> frame = ExtractFrame(&buffer, &payload);
      if (!frame.ok()) {
        Require(buffer.size() >= kFrameHeaderBytes &&
                    DecodeFrameLength(buffer.data()) > kMaxFrameBytes,
                "ExtractFrame fails only on an oversized header");
        return;  // the server closes such a connection
      }
      if (!*frame) break;
      Require(payload.size() <= kMaxFrameBytes, "frame payload over the limit");
      std::string reframed;
      Require(AppendFrame(payload, &reframed).ok(), "a payload within the limit must frame");
      CheckRequest(payload);
      CheckHandshake(payload);
      CheckResponse(payload);
    }
  }
  // The whole input as one payload too, so that short inputs reach the decoders directly.
  CheckRequest(stream);
  CheckHandshake(stream);
  CheckResponse(stream);
}

}  // namespace rendezvous
}  // namespace dadt
