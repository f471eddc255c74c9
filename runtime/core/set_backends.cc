#include "runtime/core/set_backends.h"

#include <utility>

#include "runtime/backends/engine_builder.h"
#include "runtime/common/logging.h"

namespace dadt {
namespace core {
namespace {

// Moves this rank's entries of `r` (keyed by EntryKey) into a map keyed by plain name, which is
// how an Executor looks them up.
EntryMap TakeByName(const Response& r, EntryMap& entries) {
  EntryMap taken;
  for (const std::string& name : r.names) {
    auto it = entries.find(EntryKey(r.process_set_id, name));
    if (it == entries.end()) continue;
    taken.emplace(name, std::move(it->second));
    entries.erase(it);
  }
  return taken;
}

}  // namespace

SetBackends::SetBackends(std::string engine, const backends::BackendOptions& job, Executor* global,
                         HandleTable* handles, TensorQueue* queue,
                         const timeline::EventStream* events)
    : engine_(std::move(engine)),
      job_(job),
      global_(global),
      handles_(handles),
      queue_(queue),
      events_(events),
      table_(job.size, job.rank) {}

SetBackends::~SetBackends() { ReleaseAll(); }

std::optional<ProcessSet> SetBackends::Find(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ProcessSet* set = table_.Find(id);
  if (set == nullptr) return std::nullopt;
  return *set;
}

std::vector<int32_t> SetBackends::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.ids();
}

Status SetBackends::ApplyFromLoop(const Response& r, EntryMap& entries) {
  Status failure;  // for the handle only
  if (r.type == Response::Type::kProcessSetAdd) {
    StatusOr<int32_t> id = InternalError("unset");
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = table_.Add(std::vector<int>(r.sizes.begin(), r.sizes.end()));
    }
    if (!id.ok() || *id != r.root) {
      const std::string here =
          id.ok() ? "assigned id " + std::to_string(*id) : id.status().message();
      return InternalError("process set tables diverged: the coordinator added process set " +
                           std::to_string(r.root) + ", this rank " + here);
    }
    const ProcessSet set = *Find(*id);
    if (set.included()) {
      Plane& plane = planes_[*id];
      auto backend = backends::CreateDataPlane(engine_, SetBackendOptions(job_, set),
                                               /*hierarchical=*/false);
      if (backend.ok()) {
        plane.backend = std::move(*backend);
        plane.executor = std::make_unique<Executor>(plane.backend.get(), set.set_rank, set.size(),
                                                    handles_, queue_, events_);
      } else {
        plane.broken = Status(backend.status().code(),
                              set.Describe() + " could not connect its data plane: " +
                                  backend.status().message());
        failure = plane.broken;
        DADT_LOG(ERROR) << failure.message();
      }
    }
  } else {
    if (!r.sizes.empty() && r.sizes[0] == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      Status s = table_.Remove(r.root);
      if (!s.ok()) return InternalError("process set tables diverged: " + s.message());
    }
    planes_.erase(r.root);  // its backend goes now
  }
  if (failure.ok()) return global_->Execute(r, entries);  // the id (or 1, 0) to the handle
  auto it = entries.find(EntryKey(r.process_set_id, r.names[0]));
  if (it != entries.end()) {
    HandleResult result;
    result.status = failure;
    global_->Finish(it->second, std::move(result));
    entries.erase(it);
  }
  return Status::OK();
}

Status SetBackends::ExecuteFromLoop(const Response& r, EntryMap& entries) {
  EntryMap mine = TakeByName(r, entries);
  if (r.type == Response::Type::kError) return global_->Execute(r, mine);  // to the handles
  auto plane = planes_.find(r.process_set_id);
  Status refused;
  if (plane == planes_.end()) {
    if (mine.empty()) return Status::OK();  // not a member: nothing to do
    refused = InvalidArgument("this rank is not a member of process set " +
                              std::to_string(r.process_set_id));
  } else if (!plane->second.broken.ok()) {
    refused = plane->second.broken;
  }
  if (!refused.ok()) {
    for (auto& kv : mine) {
      HandleResult result;
      result.status = refused;
      global_->Finish(kv.second, std::move(result));
    }
    return Status::OK();
  }
  Response in_set = r;
  if (r.type == Response::Type::kBroadcast) {
    const ProcessSet set = *Find(r.process_set_id);
    in_set.root = set.SetRankOf(r.root);
  }
  return plane->second.executor->Execute(in_set, mine);
}

void SetBackends::ReleaseAll() {
  planes_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  table_ = ProcessSetTable(job_.size, job_.rank);
}

}  // namespace core
}  // namespace dadt
