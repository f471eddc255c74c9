#include "runtime/core/response_dispatcher.h"

#include <utility>

namespace dadt {
namespace core {
namespace {

// Moves this rank's entries for `r` out of `entries` (a joined rank has none).
EntryMap TakeEntries(const Response& r, EntryMap& entries) {
  EntryMap taken;
  for (const std::string& name : r.names) {
    auto it = entries.find(name);
    if (it == entries.end()) continue;
    taken.emplace(name, std::move(it->second));
    entries.erase(it);
  }
  return taken;
}

}  // namespace

const char* RouteName(Route route) {
  switch (route) {
    case Route::kLane: return "lane";
    case Route::kHere: return "here";
    case Route::kHereAfterLanes: return "here after the lanes";
  }
  return "unknown";
}

Route RouteFor(const Response& r, bool have_lanes) {
  if (have_lanes && Lanes::Runs(r)) return Route::kLane;
  // An eager allreduce of CPU tensors: the response carries its result, and copying it out touches
  // no connection, so waiting for the lanes would only stall the negotiation of what comes next
  // (in sync mode, every small bias gradient drained both lanes).
  if (r.eager && r.device < 0) return Route::kHere;
  return Route::kHereAfterLanes;
}

void LanesAndExecutor::RunOnLane(const Response& response, EntryMap entries) {
  lanes_->Submit(response, std::move(entries));
}

Status LanesAndExecutor::DrainLanes() {
  if (!lanes_) return Status::OK();
  lanes_->Drain();
  return lanes_->TakeFailure();
}

Status LanesAndExecutor::RunHere(const Response& response, EntryMap& entries) {
  if (sets_ != nullptr && SetBackends::Changes(response.type)) {
    return sets_->ApplyFromLoop(response, entries);
  }
  if (sets_ != nullptr && response.process_set_id != 0) {
    return sets_->ExecuteFromLoop(response, entries);
  }
  return executor_->Execute(response, entries);
}

ResponseDispatcher::ResponseDispatcher(ResponseRunner* runner, const timeline::EventStream* events,
                                       ResponseCache* replica,
                                       std::function<void(const Response&)> on_executed)
    : runner_(runner), events_(events), replica_(replica), on_executed_(std::move(on_executed)) {}

Status ResponseDispatcher::Dispatch(const std::vector<Response>& responses, EntryMap& entries) {
  const bool traced = events_ && events_->enabled();
  if (traced && mark_cycles_ && !responses.empty()) {
    events_->Emit(
        {timeline::NowMicros(), timeline::Phase::kInstant, "", timeline::kCycleStart, ""});
  }
  for (const Response& resp : responses) {
    if (events_ && events_->enabled()) MarkNegotiated(resp, entries);
    if (replica_) FillReplica(resp, entries);
    const Route route = RouteFor(resp, runner_->has_lanes());
    if (route == Route::kLane) {
      runner_->RunOnLane(resp, TakeEntries(resp, entries));
      if (on_executed_) on_executed_(resp);
      continue;
    }
    Status s = route == Route::kHereAfterLanes ? runner_->DrainLanes() : Status::OK();
    if (s.ok()) s = runner_->RunHere(resp, entries);
    if (!s.ok()) return s;
    if (on_executed_) on_executed_(resp);
  }
  return Status::OK();
}

void ResponseDispatcher::MarkNegotiated(const Response& resp, const EntryMap& entries) const {
  const int64_t t = timeline::NowMicros();
  for (const std::string& name : resp.names) {
    auto e = entries.find(EntryKey(resp.process_set_id, name));
    if (e == entries.end()) continue;
    const char* op = OpTypeName(e->second.request.op);
    events_->Emit({t, timeline::Phase::kEnd, timeline::TensorRow(op, name), timeline::NegotiateActivity(op),
                   resp.type == Response::Type::kError ? "{\"error\":true}" : ""});
  }
}

void ResponseDispatcher::FillReplica(const Response& resp, const EntryMap& entries) {
  for (size_t i = 0; i < resp.names.size() && i < resp.cache_slots.size(); ++i) {
    if (resp.cache_slots[i] < 0) continue;
    auto e = entries.find(EntryKey(resp.process_set_id, resp.names[i]));
    if (e != entries.end()) {
      replica_->Put(CachedRef{resp.cache_slots[i], resp.cache_generations[i]}, e->second.request);
    }
  }
}

}  // namespace core
}  // namespace dadt
