// ByteWriter / ByteReader: the little-endian encoding of the controller's messages.
//
// Every read is bounds-checked; a short or malformed buffer makes the reader fail (ok() == false)
// instead of reading past the end, so a corrupt peer message is an error, never a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dadt {
namespace core {

class ByteWriter {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void PutInts(const std::vector<int64_t>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) Put<int64_t>(x);
  }
  std::string Take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  ByteReader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  T Get() {
    T v{};
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string GetString() {
    uint32_t n = Get<uint32_t>();
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return {};
    }
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> GetInts() {
    uint32_t n = Get<uint32_t>();
    if (!ok_ || static_cast<size_t>(end_ - p_) / sizeof(int64_t) < n) {
      ok_ = false;
      return {};
    }
    std::vector<int64_t> v(n);
    for (auto& x : v) x = Get<int64_t>();
    return v;
  }
  bool ok() const { return ok_; }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace core
}  // namespace dadt
