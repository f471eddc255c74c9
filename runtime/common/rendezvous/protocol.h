// The rendezvous key-value protocol spoken between dadtrun's server and each rank's runtime.
//
// Use it through RendezvousClient (client.h) and dadtrun's RendezvousServer; this header holds the
// wire format so that both sides, and the tests, share one definition.
//
// Wire format (all integers little-endian), over one persistent TCP connection per client:
//   1. Every message is a frame: u32 payload length, then the payload. A payload longer than
//      kMaxFrameBytes is refused (the server answers kBadRequest and closes the connection).
//   2. The handshake (runtime/common/auth/keyed_proof.h): the secret never crosses the wire.
//        server -> client, on accept: challenge  u8 version, server nonce (auth::kNonceBytes);
//        client -> server:            hello      u8 version, client nonce, Proof(secret,
//                                                kClientLabel, server nonce, client nonce);
//        server -> client:            a response: kOk with Proof(secret, kServerLabel, client
//                                                nonce, server nonce), or kUnauthorized (closed).
//      A client checks the server's proof too: a process that only listens on the port is not
//      taken for dadtrun.
//   3. Request payload:  u8 version (kProtocolVersion), u8 op (kSet|kGet|kAdd),
//                        u16 key length + key, u32 value length + value.
//   4. Response payload: u8 status (kOk|kNotFound|kUnauthorized|kBadRequest), u32 value length + value.
//   5. The server answers each request in order. kGet never blocks on the server: an absent key is
//      kNotFound and the client polls. kAdd treats the stored value (absent = "0") and the request
//      value as decimal int64, stores the sum and answers it.
//   6. A hello with a wrong proof gets kUnauthorized and the connection is closed; so does any
//      malformed frame (kBadRequest), and a request before the handshake.
//
//   std::string payload, frame;
//   DADT_RETURN_IF_ERROR(EncodeRequest({Op::kSet, "ready/0", "1"}, &payload));
//   DADT_RETURN_IF_ERROR(AppendFrame(payload, &frame));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/status.h"

namespace dadt {
namespace rendezvous {

inline constexpr uint8_t kProtocolVersion = 2;  // 1 sent the secret itself
inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kMaxFrameBytes = 1 << 20;  // 1 MiB of payload
inline constexpr size_t kMaxKeyBytes = 0xFFFF;

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum class ResponseStatus : uint8_t { kOk = 0, kNotFound = 1, kUnauthorized = 2, kBadRequest = 3 };

// The handshake's labels (what each side's proof is for).
inline constexpr char kClientLabel[] = "dadt rendezvous client";
inline constexpr char kServerLabel[] = "dadt rendezvous server";

struct Request {
  Op op = Op::kGet;
  std::string key;
  std::string value;
};

struct Response {
  ResponseStatus status = ResponseStatus::kOk;
  std::string value;
};

const char* OpName(Op op);
const char* ResponseStatusName(ResponseStatus status);

// Payload <-> struct. Decoding checks every length against the bytes that remain and rejects
// trailing bytes, an unknown version, op or status with InvalidArgument; it never reads past `payload`.
Status EncodeRequest(const Request& request, std::string* payload);
Status DecodeRequest(std::string_view payload, Request* request);
Status EncodeResponse(const Response& response, std::string* payload);
Status DecodeResponse(std::string_view payload, Response* response);

// Appends the u32 length header and `payload` to `out`; refuses payloads over kMaxFrameBytes.
Status AppendFrame(std::string_view payload, std::string* out);

// Stream reassembly: if `buffer` starts with a whole frame, moves its payload to `payload`, erases
// the frame from `buffer` and returns true; returns false when more bytes are needed. A header that
// announces more than kMaxFrameBytes is InvalidArgument (the stream cannot be resynchronised).
StatusOr<bool> ExtractFrame(std::string* buffer, std::string* payload);

// Reads the length header at the start of `header` (kFrameHeaderBytes bytes).
uint32_t DecodeFrameLength(const char* header);

// The handshake's payloads (step 2 above). Decoding checks the version and every field's size.
std::string EncodeChallenge(std::string_view server_nonce);
Status DecodeChallenge(std::string_view payload, std::string* server_nonce);
std::string EncodeHello(std::string_view client_nonce, std::string_view proof);
Status DecodeHello(std::string_view payload, std::string* client_nonce, std::string* proof);

// The kAdd semantics shared by the server and InMemoryStore: `current` (nullptr = absent = 0) plus
// `delta`, both decimal int64. InvalidArgument on junk or overflow; otherwise the sum in `*result`.
Status ApplyAdd(const std::string* current, std::string_view delta, std::string* result);

}  // namespace rendezvous
}  // namespace dadt
