#include "runtime/backends/gloo/store_adapter.h"

#include <algorithm>

#include "runtime/backends/gloo/gloo_error.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

StoreAdapter::StoreAdapter(KeyValueStore* store, std::string prefix,
                           std::chrono::milliseconds timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

std::string StoreAdapter::HexEncode(const std::vector<char>& data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(data.size() * 2);
  for (char c : data) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

bool StoreAdapter::HexDecode(const std::string& text, std::vector<char>* out) {
  if (text.size() % 2 != 0) return false;
  out->clear();
  out->reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = HexValue(text[i]), lo = HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

void StoreAdapter::Fail(const Status& status) {
  if (status.code() == StatusCode::kTimeout) key_never_appeared_ = true;
  throw StoreError(status);
}

void StoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  Status s = store_->Set(FullKey(key), HexEncode(data));
  if (!s.ok()) throw StoreError(s);
}

std::vector<char> StoreAdapter::get(const std::string& key) {
  StatusOr<std::string> value = store_->Get(FullKey(key), timeout_);
  if (!value.ok()) Fail(value.status());
  std::vector<char> data;
  if (!HexDecode(*value, &data)) {
    throw StoreError(InternalError("rendezvous key '" + FullKey(key) +
                                   "' holds a value that is not hex (another writer?)"));
  }
  return data;
}

void StoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void StoreAdapter::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  // Gloo's connectFullMesh passes its context's timeout here, which the mesh sets to the pair
  // connect timeout (mesh.h, kPairConnectTimeout): a peer still on its way to init() (a slow
  // import, a worker that a new round just started) would be given up on after that, not after
  // the start timeout. The meeting is ours to bound: never less than this adapter's timeout.
  // One deadline for the whole set, as Gloo's own stores do. Get() returns as soon as a key
  // exists, so waiting for the keys one after another costs no more than the slowest of them.
  const auto deadline = std::chrono::steady_clock::now() + std::max(timeout, timeout_);
  for (const auto& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    StatusOr<std::string> value =
        store_->Get(FullKey(key), std::max(left, std::chrono::milliseconds(0)));
    if (!value.ok()) Fail(value.status());
  }
}

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
