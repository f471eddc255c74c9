#include "runtime/backends/backend.h"

#include <map>

namespace dadt {
namespace backends {
namespace {

std::map<std::string, BackendFactory>& Table() {
  static auto* table = new std::map<std::string, BackendFactory>();
  return *table;
}

}  // namespace

bool BackendRegistry::Register(const std::string& name, BackendFactory factory) {
  return Table().emplace(name, std::move(factory)).second;
}

StatusOr<std::unique_ptr<Backend>> BackendRegistry::Create(const std::string& name,
                                                           const BackendOptions& options) {
  auto it = Table().find(name);
  if (it == Table().end()) {
    std::string have;
    for (const auto& n : Names()) have += (have.empty() ? "" : ", ") + n;
    return Unimplemented("backend '" + name + "' is not built into this dadt (available: " + have +
                         ")");
  }
  return it->second(options);
}

std::vector<std::string> BackendRegistry::Names() {
  std::vector<std::string> names;
  for (const auto& kv : Table()) names.push_back(kv.first);
  return names;
}

}  // namespace backends
}  // namespace dadt
