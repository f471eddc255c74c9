#include "runtime/common/rendezvous/scoped_store.h"

namespace dadt {
namespace rendezvous {

std::string IncarnationScope(int64_t incarnation) {
  return "run/" + std::to_string(incarnation) + "/";
}

Status ScopedStore::Set(const std::string& key, const std::string& value) {
  return base_->Set(prefix_ + key, value);
}

StatusOr<std::string> ScopedStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->Get(prefix_ + key, timeout);
}

}  // namespace rendezvous
}  // namespace dadt
