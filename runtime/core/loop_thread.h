// LoopThreadChecker: makes the runtime's thread rule checkable. Runtime state is touched only on
// its loop thread (docs/thread_model.md); methods that rely on it are named `...FromLoop` and
// open with DADT_DCHECK_ON_LOOP, as TensorPipe's do with TP_DCHECK(inLoop()).
//
//   LoopThreadChecker loop_checker_;
//   void Runtime::LoopMain() { loop_checker_.BindToThisThread(); ... }
//   void Runtime::AbortFromLoop(...) { DADT_DCHECK_ON_LOOP(loop_checker_); ... }
//
// Debug builds abort with file:line when such a method runs on another thread (or before the loop
// started); with NDEBUG the check is compiled out (DADT_DCHECK), so release builds pay nothing.
#pragma once

#include <atomic>
#include <thread>

#include "runtime/common/logging.h"

namespace dadt {
namespace core {

class LoopThreadChecker {
 public:
  // Called first thing on the loop thread.
  void BindToThisThread() { loop_id_.store(std::this_thread::get_id(), std::memory_order_release); }
  bool OnLoopThread() const {
    return loop_id_.load(std::memory_order_acquire) == std::this_thread::get_id();
  }

 private:
  std::atomic<std::thread::id> loop_id_{};
};

}  // namespace core
}  // namespace dadt

#define DADT_DCHECK_ON_LOOP(checker) \
  DADT_DCHECK((checker).OnLoopThread()) << "must run on the runtime's loop thread "
