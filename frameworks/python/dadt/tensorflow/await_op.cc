// DadtAwait: the TensorFlow op that waits for a dadt collective without holding a thread.
//
// In graph mode (tf.function, tf.compat.v1 Session.run) dadt.tensorflow runs each collective as
// three ops (dadt/tensorflow/graph_ops.py):
//
//   1. submit  a stateful tf.numpy_function that enqueues the collective (dadt_enqueue) and
//              returns its handle at once;
//   2. await   this op: an AsyncOpKernel that hands the wait to a thread of its own and returns
//              TensorFlow's inter-op thread to the executor at once; `done` runs when the
//              collective completed, and the op fails with the collective's status (mismatch ->
//              FailedPrecondition, bad argument -> InvalidArgument, ...) as Horovod's ops do;
//   3. take    a tf.numpy_function that collects the completed result (never blocks).
//
// A blocking op in place of 2 would hold one of TensorFlow's few inter-op threads (as many as
// cores) while it waits for a partner op on another rank, and a graph with more pending
// collectives than threads would deadlock. Here no TensorFlow thread ever waits.
//
// The kernel does not link against dadt: Python passes it the address of dadt_wait_for from the
// loaded dadt._core and the runtime-status -> TensorFlow-status table (dadt.common.exceptions),
// through dadt_tf_configure. Built on first use by dadt/tensorflow/graph_ops.py with
// tf.sysconfig's flags.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace {

using WaitForFn = int (*)(int64_t handle, int64_t timeout_ms, char* msg, size_t msg_len);

constexpr int kMaxCodes = 16;
constexpr int kPending = -2;  // DADT_PENDING of runtime/c_api.h
std::atomic<WaitForFn> g_wait_for{nullptr};
// Runtime status code (DADT_ERR_*) -> absl::StatusCode; written once before the first op runs.
std::atomic<int> g_status_of[kMaxCodes];

absl::Status ToStatus(int code, const char* msg) {
  int canonical = (code >= 0 && code < kMaxCodes) ? g_status_of[code].load() : 0;
  if (canonical == 0) canonical = static_cast<int>(absl::StatusCode::kInternal);
  return absl::Status(static_cast<absl::StatusCode>(canonical), msg);
}

class DadtAwaitOp : public tensorflow::AsyncOpKernel {
 public:
  explicit DadtAwaitOp(tensorflow::OpKernelConstruction* context) : AsyncOpKernel(context) {}

  void ComputeAsync(tensorflow::OpKernelContext* context, DoneCallback done) override {
    const tensorflow::Tensor& handle_tensor = context->input(0);
    const int64_t handle = handle_tensor.scalar<int64_t>()();
    context->set_output(0, handle_tensor);
    WaitForFn wait_for = g_wait_for.load();
    OP_REQUIRES_ASYNC(context, wait_for != nullptr,
                      absl::FailedPreconditionError(
                          "dadt: DadtAwait ran before dadt.tensorflow configured it"),
                      done);
    char msg[4096] = {0};
    const int now = wait_for(handle, 0, msg, sizeof msg);
    if (now != kPending) {  // already complete: finish here, no thread needed
      if (now != 0) context->SetStatus(ToStatus(now, msg));
      done();
      return;
    }
    // One short-lived thread per pending collective: the wait may last as long as the slowest
    // rank takes to submit, and it must not occupy a thread TensorFlow schedules ops on.
    std::thread([wait_for, handle, context, done = std::move(done)]() {
      char msg[4096] = {0};
      const int rc = wait_for(handle, -1, msg, sizeof msg);
      if (rc != 0) context->SetStatus(ToStatus(rc, msg));
      done();
    }).detach();
  }
};

}  // namespace

// Called once from Python before the first DadtAwait runs: `wait_for` is dadt_wait_for of the
// loaded runtime, `status_of[i]` the absl::StatusCode for runtime status i.
extern "C" __attribute__((visibility("default"))) void dadt_tf_configure(void* wait_for,
                                                                         const int* status_of,
                                                                         int count) {
  for (int i = 0; i < count && i < kMaxCodes; ++i) g_status_of[i].store(status_of[i]);
  g_wait_for.store(reinterpret_cast<WaitForFn>(wait_for));
}

REGISTER_OP("DadtAwait")
    .Input("handle: int64")
    .Output("done: int64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("Waits, without holding a thread, for the dadt collective `handle`; outputs it.");

REGISTER_KERNEL_BUILDER(Name("DadtAwait").Device(tensorflow::DEVICE_CPU), DadtAwaitOp);
