// The C API's process sets (runtime/c_api.h): adding, removing and listing them.
#include <string>
#include <vector>

#include "runtime/c_api.h"
#include "runtime/c_api_internal.h"
#include "runtime/core/runtime.h"

namespace {

using dadt::capi::Fail;
using dadt::capi::GetRunning;
using dadt::capi::NotInitialized;

}  // namespace

extern "C" {

int dadt_add_process_set(const int32_t* ranks, int n, int32_t* id) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  if (n < 0 || (n > 0 && !ranks)) return Fail(dadt::InvalidArgument("add_process_set: no ranks"));
  auto added = rt->AddProcessSet(std::vector<int>(ranks, ranks + n));
  if (!added.ok()) return Fail(added.status());
  if (id) *id = *added;
  return DADT_OK;
}

int dadt_remove_process_set(int32_t id, int* removed) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  auto done = rt->RemoveProcessSet(id);
  if (!done.ok()) return Fail(done.status());
  if (removed) *removed = *done ? 1 : 0;
  return DADT_OK;
}

int dadt_process_set_ids(int32_t* out, int n) {
  auto rt = GetRunning();
  if (!rt) return (Fail(NotInitialized()), -1);
  const std::vector<int32_t> ids = rt->process_sets().ids();
  for (int i = 0; out != nullptr && i < n && i < static_cast<int>(ids.size()); ++i) out[i] = ids[i];
  return static_cast<int>(ids.size());
}

int dadt_process_set_ranks(int32_t id, int32_t* out, int n) {
  auto rt = GetRunning();
  if (!rt) return (Fail(NotInitialized()), -1);
  auto set = rt->process_sets().Find(id);
  const std::string id_text = std::to_string(id);
  if (!set) return (Fail(dadt::InvalidArgument("process set " + id_text + " is not registered")), -1);
  for (int i = 0; out != nullptr && i < n && i < set->size(); ++i) out[i] = set->ranks[i];
  return set->size();
}

}  // extern "C"
