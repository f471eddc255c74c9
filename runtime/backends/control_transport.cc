#include "runtime/backends/control_transport.h"

#include <map>

namespace dadt {
namespace backends {
namespace {

std::map<std::string, ControlTransportFactory>& Table() {
  static auto* table = new std::map<std::string, ControlTransportFactory>();
  return *table;
}

}  // namespace

bool ControlTransportRegistry::Register(const std::string& name, ControlTransportFactory factory) {
  return Table().emplace(name, std::move(factory)).second;
}

bool ControlTransportRegistry::Has(const std::string& name) { return Table().count(name) > 0; }

StatusOr<std::unique_ptr<ControlTransport>> ControlTransportRegistry::Create(
    const std::string& name, const ControlTransportOptions& options) {
  auto it = Table().find(name);
  if (it == Table().end()) {
    return Unimplemented("controller '" + name + "' is not built into this dadt");
  }
  return it->second(options);
}

}  // namespace backends
}  // namespace dadt
