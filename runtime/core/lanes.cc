#include "runtime/core/lanes.h"

#include "runtime/common/thread_priority.h"

namespace dadt {
namespace core {

std::unique_ptr<Lanes> Lanes::Create(backends::Backend* backend, int count, int rank, int size,
                                     HandleTable* handles, TensorQueue* queue,
                                     const timeline::EventStream* events, bool realtime,
                                     std::function<void()> wake) {
  if (count < 2) return nullptr;
  std::unique_ptr<Lanes> lanes(new Lanes(realtime, std::move(wake)));
  for (int i = 0; i < count; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->backend = backend->Fork();
    if (!lane->backend) return nullptr;  // an engine that runs one collective at a time
    lane->executor = std::make_unique<Executor>(lane->backend.get(), rank, size, handles, queue,
                                                events);
    lanes->lanes_.push_back(std::move(lane));
  }
  for (auto& lane : lanes->lanes_) {
    lane->thread = std::thread([l = lanes.get(), lane = lane.get()] { l->Run(lane); });
  }
  return lanes;
}

Lanes::~Lanes() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
  }
}

bool Lanes::Runs(const Response& r) {
  // Adasum swaps pair by pair (Backend::Exchange), as point to point does: on the loop thread.
  return Executor::MovesData(r.type) && !r.eager && r.device < 0 && r.process_set_id == 0 &&
         r.reduce_op != ReduceOp::kAdasum;
}

void Lanes::Submit(const Response& r, EntryMap entries) {
  Lane* lane = lanes_[submitted_++ % lanes_.size()].get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    lane->jobs.push_back(Job{r, std::move(entries)});
  }
  work_cv_.notify_all();
}

void Lanes::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] {
    for (const auto& lane : lanes_) {
      if (lane->busy || !lane->jobs.empty()) return false;
    }
    return true;
  });
}

Status Lanes::TakeFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = failure_;
  failure_ = Status::OK();
  return s;
}

void Lanes::Cancel(const Status& status) {
  std::vector<std::pair<Lane*, Job>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& lane : lanes_) {
      for (Job& job : lane->jobs) cancelled.emplace_back(lane.get(), std::move(job));
      lane->jobs.clear();
    }
  }
  for (auto& [lane, job] : cancelled) {
    for (auto& kv : job.entries) {
      HandleResult res;
      res.status = status;
      lane->executor->Finish(kv.second, std::move(res));
    }
  }
  idle_cv_.notify_all();
}

void Lanes::Run(Lane* lane) {
  if (realtime_) (void)MakeThisThreadRealtime();  // the loop thread logs when it is not allowed
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !lane->jobs.empty(); });
    if (lane->jobs.empty()) return;  // stopping, and nothing left to run
    Job job = std::move(lane->jobs.front());
    lane->jobs.pop_front();
    lane->busy = true;
    lock.unlock();
    Status s = lane->executor->Execute(job.response, job.entries);
    // Execute completes what it consumes; anything it left (it stopped at a failure) fails here.
    for (auto& kv : job.entries) {
      HandleResult res;
      res.status = s.ok() ? InternalError("response '" + job.response.names[0] +
                                          "' left tensor '" + kv.first + "' unfinished")
                          : s;
      lane->executor->Finish(kv.second, std::move(res));
    }
    lock.lock();
    lane->busy = false;
    const bool first_failure = !s.ok() && failure_.ok();
    if (first_failure) failure_ = s;
    idle_cv_.notify_all();
    if (first_failure) {
      lock.unlock();
      wake_();
      lock.lock();
    }
  }
}

}  // namespace core
}  // namespace dadt
