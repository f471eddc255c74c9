#include "timeline/event.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>

#include "timeline/internal/json_text.h"

namespace dadt {
namespace timeline {
namespace {

void AppendUpper(std::string* out, std::string_view s) {
  for (char c : s) out->push_back(c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
}

}  // namespace

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string OpActivity(std::string_view op) {
  std::string out;
  AppendUpper(&out, op);
  return out;
}

std::string NegotiateActivity(std::string_view op) {
  std::string out = "NEGOTIATE_";
  AppendUpper(&out, op);
  return out;
}

std::string BackendActivity(std::string_view backend, std::string_view op) {
  std::string out;
  AppendUpper(&out, backend);
  out.push_back('_');
  AppendUpper(&out, op == "broadcast" ? std::string_view("bcast") : op);
  return out;
}

std::string TensorRow(std::string_view op, std::string_view name) {
  auto starts_with_op = [&](std::string_view prefix) {
    return name.size() > prefix.size() + op.size() && name.substr(0, prefix.size()) == prefix &&
           name.substr(prefix.size(), op.size()) == op && name[prefix.size() + op.size()] == '.';
  };
  if (op.empty() || starts_with_op("") || starts_with_op("grouped_")) return std::string(name);
  std::string out;
  out.reserve(op.size() + 1 + name.size());
  out.append(op);
  out.push_back('.');
  out.append(name);
  return out;
}

std::string RankReadyActivity(int rank) { return std::to_string(rank); }

std::string TensorArgs(std::string_view dtype, const std::vector<int64_t>& shape) {
  std::string out;
  out.reserve(32 + dtype.size() + 8 * shape.size());
  out.append("{\"dtype\":");
  internal::AppendJsonString(&out, dtype);
  out.append(",\"shape\":[");
  char buf[24];
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out.push_back(',');
    out.append(buf, std::to_chars(buf, buf + sizeof(buf), shape[i]).ptr - buf);
  }
  out.append("]}");
  return out;
}

std::string ReadyRankArgs(int rank) { return "{\"ready_rank\":" + std::to_string(rank) + "}"; }

void EventStream::AddSink(std::shared_ptr<EventSink> sink) {
  if (!sink) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto next = std::make_shared<SinkList>();
  if (sinks_) {
    for (const auto& s : *sinks_) {
      if (s == sink) return;
    }
    *next = *sinks_;
  }
  next->push_back(std::move(sink));
  Replace(std::move(next));
}

void EventStream::Replace(std::shared_ptr<const SinkList> next) {
  // Lists that no Emit holds any more are forgotten; the rest are waited for by RemoveSink.
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [](const std::weak_ptr<const SinkList>& w) { return w.expired(); }),
                 retired_.end());
  if (sinks_) retired_.push_back(sinks_);
  std::atomic_store_explicit(&sinks_, std::move(next), std::memory_order_release);
  enabled_.store(sinks_ != nullptr, std::memory_order_relaxed);
}

bool EventStream::RemoveSink(const EventSink* sink) {
  std::vector<std::weak_ptr<const SinkList>> in_flight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sinks_) return false;
    auto it = std::find_if(sinks_->begin(), sinks_->end(),
                           [&](const std::shared_ptr<EventSink>& s) { return s.get() == sink; });
    if (it == sinks_->end()) return false;
    std::shared_ptr<SinkList> next;
    if (sinks_->size() > 1) {
      next = std::make_shared<SinkList>();
      for (const auto& s : *sinks_) {
        if (s.get() != sink) next->push_back(s);
      }
    }
    Replace(std::move(next));
    in_flight = retired_;
  }
  // An Emit that loaded an older list (any of them may hold `sink`) keeps it alive until its
  // Consume calls return; new Emits only see the new list, so these lists can only expire. The
  // fence pairs with the release decrement in ~shared_ptr: what those Consume calls did happens
  // before RemoveSink returns.
  for (const auto& list : in_flight) {
    while (!list.expired()) std::this_thread::yield();
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

size_t EventStream::sink_count() const {
  auto sinks = std::atomic_load_explicit(&sinks_, std::memory_order_acquire);
  return sinks ? sinks->size() : 0;
}

void EventStream::Emit(const Event& event) const {
  auto sinks = std::atomic_load_explicit(&sinks_, std::memory_order_acquire);
  if (!sinks) return;
  std::lock_guard<std::mutex> lock(emit_mu_);  // one producer at a time, as sinks expect
  for (const auto& sink : *sinks) sink->Consume(event);
}

}  // namespace timeline
}  // namespace dadt
