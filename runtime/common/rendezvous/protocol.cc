#include "runtime/common/rendezvous/protocol.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

namespace dadt {
namespace rendezvous {
namespace {

void PutU16(uint16_t v, std::string* out) {
  out->push_back(static_cast<char>(v & 0xFF));
  out->push_back(static_cast<char>((v >> 8) & 0xFF));
}

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Bounds-checked little-endian reader over a payload: every Read* fails instead of overrunning.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  bool ReadU8(uint8_t* v) {
    if (data_.size() - pos_ < 1) return false;
    *v = static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool ReadU16(uint16_t* v) {
    if (data_.size() - pos_ < 2) return false;
    *v = static_cast<uint16_t>(Byte(0) | (Byte(1) << 8));
    pos_ += 2;
    return true;
  }
  bool ReadU32(uint32_t* v) {
    if (data_.size() - pos_ < 4) return false;
    *v = Byte(0) | (Byte(1) << 8) | (Byte(2) << 16) | (Byte(3) << 24);
    pos_ += 4;
    return true;
  }
  bool ReadBytes(size_t n, std::string* out) {
    if (data_.size() - pos_ < n) return false;
    out->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  uint32_t Byte(size_t i) const { return static_cast<uint8_t>(data_[pos_ + i]); }

  std::string_view data_;
  size_t pos_ = 0;
};

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  std::string copy(s);
  if (copy[0] != '-' && copy[0] != '+' && (copy[0] < '0' || copy[0] > '9')) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(copy.c_str(), &end, 10);
  if (errno != 0 || end != copy.c_str() + copy.size()) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

Status CheckVersion(uint8_t version) {
  if (version == kProtocolVersion) return Status::OK();
  return InvalidArgument("unsupported protocol version " + std::to_string(version) + " (expected " +
                         std::to_string(kProtocolVersion) +
                         "): the rank's dadt and dadtrun come from different releases");
}

// A handshake payload: the version, then fixed-size fields.
std::string EncodeFixed(std::initializer_list<std::string_view> fields) {
  std::string payload(1, static_cast<char>(kProtocolVersion));
  for (std::string_view f : fields) payload.append(f.data(), f.size());
  return payload;
}

Status DecodeFixed(std::string_view payload, const char* what,
                   std::initializer_list<std::pair<size_t, std::string*>> fields) {
  Reader r(payload);
  uint8_t version = 0;
  if (!r.ReadU8(&version)) return InvalidArgument(std::string("empty ") + what);
  DADT_RETURN_IF_ERROR(CheckVersion(version));
  for (const auto& [size, out] : fields) {
    if (!r.ReadBytes(size, out)) return InvalidArgument(std::string(what) + " shorter than its fields");
  }
  if (r.remaining() != 0) {
    return InvalidArgument(std::to_string(r.remaining()) + " trailing bytes after the " + what);
  }
  return Status::OK();
}

}  // namespace

std::string EncodeChallenge(std::string_view server_nonce) { return EncodeFixed({server_nonce}); }

Status DecodeChallenge(std::string_view payload, std::string* server_nonce) {
  return DecodeFixed(payload, "challenge", {{auth::kNonceBytes, server_nonce}});
}

std::string EncodeHello(std::string_view client_nonce, std::string_view proof) {
  return EncodeFixed({client_nonce, proof});
}

Status DecodeHello(std::string_view payload, std::string* client_nonce, std::string* proof) {
  return DecodeFixed(payload, "hello", {{auth::kNonceBytes, client_nonce}, {auth::kProofBytes, proof}});
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
  }
  return "UNKNOWN_OP";
}

const char* ResponseStatusName(ResponseStatus status) {
  switch (status) {
    case ResponseStatus::kOk: return "OK";
    case ResponseStatus::kNotFound: return "NOT_FOUND";
    case ResponseStatus::kUnauthorized: return "UNAUTHORIZED";
    case ResponseStatus::kBadRequest: return "BAD_REQUEST";
  }
  return "UNKNOWN_STATUS";
}

Status EncodeRequest(const Request& request, std::string* payload) {
  if (request.key.size() > kMaxKeyBytes) {
    return InvalidArgument("rendezvous key is " + std::to_string(request.key.size()) +
                           " bytes; the limit is " + std::to_string(kMaxKeyBytes));
  }
  const size_t total = 2 + 2 + request.key.size() + 4 + request.value.size();
  if (total > kMaxFrameBytes) {
    return InvalidArgument("rendezvous request for key '" + request.key + "' is " +
                           std::to_string(total) + " bytes; the limit is " +
                           std::to_string(kMaxFrameBytes));
  }
  payload->clear();
  payload->reserve(total);
  payload->push_back(static_cast<char>(kProtocolVersion));
  payload->push_back(static_cast<char>(request.op));
  PutU16(static_cast<uint16_t>(request.key.size()), payload);
  payload->append(request.key);
  PutU32(static_cast<uint32_t>(request.value.size()), payload);
  payload->append(request.value);
  return Status::OK();
}

Status DecodeRequest(std::string_view payload, Request* request) {
  Reader r(payload);
  uint8_t version = 0, op = 0;
  uint16_t key_len = 0;
  uint32_t value_len = 0;
  if (!r.ReadU8(&version) || !r.ReadU8(&op)) return InvalidArgument("request shorter than its header");
  DADT_RETURN_IF_ERROR(CheckVersion(version));
  if (op != static_cast<uint8_t>(Op::kSet) && op != static_cast<uint8_t>(Op::kGet) &&
      op != static_cast<uint8_t>(Op::kAdd)) {
    return InvalidArgument("unknown op " + std::to_string(op));
  }
  request->op = static_cast<Op>(op);
  if (!r.ReadU16(&key_len) || !r.ReadBytes(key_len, &request->key)) {
    return InvalidArgument("key length runs past the end of the request");
  }
  if (!r.ReadU32(&value_len) || !r.ReadBytes(value_len, &request->value)) {
    return InvalidArgument("value length runs past the end of the request");
  }
  if (r.remaining() != 0) {
    return InvalidArgument(std::to_string(r.remaining()) + " trailing bytes after the request");
  }
  return Status::OK();
}

Status EncodeResponse(const Response& response, std::string* payload) {
  if (1 + 4 + response.value.size() > kMaxFrameBytes) {
    return InvalidArgument("rendezvous response value is " + std::to_string(response.value.size()) +
                           " bytes; the limit is " + std::to_string(kMaxFrameBytes - 5));
  }
  payload->clear();
  payload->push_back(static_cast<char>(response.status));
  PutU32(static_cast<uint32_t>(response.value.size()), payload);
  payload->append(response.value);
  return Status::OK();
}

Status DecodeResponse(std::string_view payload, Response* response) {
  Reader r(payload);
  uint8_t status = 0;
  uint32_t value_len = 0;
  if (!r.ReadU8(&status)) return InvalidArgument("empty response");
  if (status > static_cast<uint8_t>(ResponseStatus::kBadRequest)) {
    return InvalidArgument("unknown response status " + std::to_string(status));
  }
  response->status = static_cast<ResponseStatus>(status);
  if (!r.ReadU32(&value_len) || !r.ReadBytes(value_len, &response->value)) {
    return InvalidArgument("value length runs past the end of the response");
  }
  if (r.remaining() != 0) {
    return InvalidArgument(std::to_string(r.remaining()) + " trailing bytes after the response");
  }
  return Status::OK();
}

Status AppendFrame(std::string_view payload, std::string* out) {
  if (payload.size() > kMaxFrameBytes) {
    return InvalidArgument("frame payload of " + std::to_string(payload.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  }
  PutU32(static_cast<uint32_t>(payload.size()), out);
  out->append(payload.data(), payload.size());
  return Status::OK();
}

uint32_t DecodeFrameLength(const char* header) {
  const auto* b = reinterpret_cast<const unsigned char*>(header);
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

StatusOr<bool> ExtractFrame(std::string* buffer, std::string* payload) {
  if (buffer->size() < kFrameHeaderBytes) return false;
  const uint32_t length = DecodeFrameLength(buffer->data());
  if (length > kMaxFrameBytes) {
    return InvalidArgument("frame announces " + std::to_string(length) +
                           " bytes; the limit is " + std::to_string(kMaxFrameBytes));
  }
  if (buffer->size() - kFrameHeaderBytes < length) return false;
  payload->assign(*buffer, kFrameHeaderBytes, length);
  buffer->erase(0, kFrameHeaderBytes + length);
  return true;
}

Status ApplyAdd(const std::string* current, std::string_view delta, std::string* result) {
  int64_t base = 0, d = 0;
  if (current != nullptr && !ParseInt64(*current, &base)) {
    return InvalidArgument("stored value '" + *current + "' is not a decimal integer");
  }
  if (!ParseInt64(delta, &d)) {
    return InvalidArgument("add delta '" + std::string(delta) + "' is not a decimal integer");
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(base, d, &sum)) {
    return InvalidArgument("adding " + std::to_string(d) + " to " + std::to_string(base) +
                           " overflows int64");
  }
  *result = std::to_string(sum);
  return Status::OK();
}

}  // namespace rendezvous
}  // namespace dadt
