// Status and StatusOr: how errors cross thread, API and callback boundaries in dadt.
//
// A Status is OK or carries a code and a message. DADT_RETURN_IF_ERROR returns a non-OK Status
// from the enclosing function unchanged: it adds no file:line or context. Foreign error codes
// (gloo exceptions, MPI ints, ncclResult_t, cudaError_t) are converted to Status at the backend
// edge by each backend's own macros (DADT_GLOO_CHECK, DADT_MPI_CHECK, DADT_NCCL_CHECK,
// DADT_CUDA_CHECK), which put "<library> <what> failed at file:line" in the message.
//
//   Status s = backend->Allreduce(...);
//   if (!s.ok()) return s;
//   StatusOr<int> r = ParseInt("12");
//   if (r.ok()) use(*r);
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace dadt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from the caller (Python: ValueError)
  kMismatch,            // ranks disagree on a tensor (Python: TensorMismatchError, a RuntimeError)
  kPreconditionFailed,  // the runtime is not in the state the call needs
  kAborted,             // a peer or backend failed; the job cannot continue (DadtInternalError)
  kTimeout,
  kUnimplemented,       // "not supported": the selector may try the next candidate
  kInternal,
  kRemoved,             // elastic: the launcher removed this worker from the job (Python: exit 0)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status MismatchError(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
inline Status PreconditionFailed(std::string m) {
  return {StatusCode::kPreconditionFailed, std::move(m)};
}
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status TimeoutError(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status RemovedError(std::string m) { return {StatusCode::kRemoved, std::move(m)}; }

const char* StatusCodeName(StatusCode code);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace dadt

#define DADT_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::dadt::Status _dadt_status = (expr);       \
    if (!_dadt_status.ok()) return _dadt_status; \
  } while (0)

// Assigns the value of a StatusOr expression to `lhs`, or returns its status:
//   DADT_ASSIGN_OR_RETURN(o.rank, env::GetInt(env::kRank, 0));
#define DADT_ASSIGN_OR_RETURN(lhs, expr)                       \
  do {                                                         \
    auto _dadt_status_or = (expr);                             \
    if (!_dadt_status_or.ok()) return _dadt_status_or.status(); \
    lhs = *_dadt_status_or;                                    \
  } while (0)
