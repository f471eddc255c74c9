// SpscRing: a bounded single-producer/single-consumer ring of reusable slots.
//
// The producer fills a slot in place and publishes it; the consumer reads the slot in place and
// releases it. Slots are never destroyed between uses, so a slot holding std::strings keeps their
// capacity and, once warm, a push of a short string allocates nothing.
//
//   SpscRing<Event> ring(1 << 16);
//   if (Event* slot = ring.TryReserve()) { *slot = e; ring.Publish(); } else { ++dropped; }
//   while (const Event* e = ring.Front()) { Write(*e); ring.Release(); }
//
// Threading: exactly one producer thread (TryReserve/Publish) and one consumer thread
// (Front/Release) at a time. Each side caches the other's index, so the shared cache line is read
// only when the ring looks full (producer) or empty (consumer). Never blocks.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

namespace dadt {
namespace timeline {
namespace internal {

template <typename T>
class SpscRing {
 public:
  // `capacity` is rounded up to a power of two (at least 2).
  explicit SpscRing(size_t capacity) {
    size_t n = 2;
    while (n < capacity) n <<= 1;
    slots_.resize(n);
    mask_ = n - 1;
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return slots_.size(); }

  // Producer: the next free slot, or nullptr when the ring is full. Publish() makes it visible.
  T* TryReserve() {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head - cached_tail_ == slots_.size()) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head - cached_tail_ == slots_.size()) return nullptr;
    }
    return &slots_[head & mask_];
  }
  void Publish() {
    head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Consumer: the oldest published slot, or nullptr when empty. Release() frees it.
  T* Front() {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == cached_head_) {
      cached_head_ = head_.load(std::memory_order_acquire);
      if (tail == cached_head_) return nullptr;
    }
    return &slots_[tail & mask_];
  }
  void Release() {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Either side, approximate under concurrency.
  size_t SizeApprox() const {
    const size_t tail = tail_.load(std::memory_order_acquire);  // first: head only grows past it
    return head_.load(std::memory_order_acquire) - tail;
  }

 private:
  std::vector<T> slots_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> head_{0};  // written by the producer only
  size_t cached_tail_ = 0;                   // producer's copy of tail_
  alignas(64) std::atomic<size_t> tail_{0};  // written by the consumer only
  size_t cached_head_ = 0;                   // consumer's copy of head_
};

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
