// dadt._core: the pybind11 module over dadt's stable C API (runtime/c_api.h).
//
// One thin file, one function per C entry point, no state of its own. It stays one unit (just over
// 500 lines) because it is one PYBIND11_MODULE over one header: each binding is a few lines, and
// splitting them across files would only scatter the module's single definition. Tensors cross as DLPack:
// enqueue() reads the DLManagedTensor out of a "dltensor" capsule (from `tensor.__dlpack__()`)
// WITHOUT consuming it -- the Python layer keeps the capsule, and so the tensor, alive until the
// handle completes. take_output() wraps a runtime-allocated result in a new "dltensor" capsule
// that a framework's from_dlpack() consumes.
//
// Errors raise _core.CoreError (a RuntimeError) with `.code` (a DADT_ERR_* value) and `.message`
// (the runtime's text, verbatim); dadt/common/exceptions.py maps codes to Python exception types.
// The process-set calls raise ValueError directly for refusals (ERR_INVALID_ARGUMENT), as their
// contract with dadt.common says.
//
// The GIL is released around every call that may block or take a runtime lock (init, shutdown,
// enqueue, wait), so the runtime's loop thread and other Python threads keep going.
//
//   h = _core.enqueue(_core.OP_ALLREDUCE, "grad.w", t.__dlpack__(), out.__dlpack__(), ...)
//   _core.wait(h); _core.release(h)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/c_api.h"

namespace py = pybind11;

namespace {

constexpr char kCapsuleName[] = "dltensor";

// _core.CoreError; created once at import and kept for the life of the process.
PyObject* g_core_error = nullptr;

// Raises CoreError(code, message) with .code and .message set. Needs the GIL.
[[noreturn]] void ThrowCoreError(int code, const std::string& message) {
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (!text) throw py::error_already_set();
  py::object exc = py::reinterpret_borrow<py::object>(g_core_error)(code, text);
  exc.attr("code") = code;
  exc.attr("message") = text;
  PyErr_SetObject(g_core_error, exc.ptr());
  throw py::error_already_set();
}

// The failure of the last C call on this thread (the GIL release does not switch threads).
[[noreturn]] void ThrowLastError() {
  const char* message = dadt_last_error();
  int code = dadt_last_error_code();
  ThrowCoreError(code == DADT_OK ? DADT_ERR_INTERNAL : code, message ? message : "unknown error");
}

void CheckStatus(int rc) {
  if (rc != DADT_OK) ThrowLastError();
}

// The DLTensor inside a "dltensor" capsule, left unconsumed; nullptr for None.
const DLTensor* TensorFromCapsule(const py::handle& obj, const char* what) {
  if (obj.is_none()) return nullptr;
  if (!PyCapsule_CheckExact(obj.ptr())) {
    throw py::type_error(std::string(what) +
                         " must be a DLPack capsule (tensor.__dlpack__()) or None");
  }
  if (!PyCapsule_IsValid(obj.ptr(), kCapsuleName)) {
    throw py::value_error(std::string(what) +
                          " is not an unconsumed \"dltensor\" capsule (already consumed, or a "
                          "versioned DLPack capsule)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  return &managed->dl_tensor;
}

// Destructor of capsules made by take_output() and buffer_capsule(): frees the tensor unless a
// consumer (from_dlpack) renamed the capsule to "used_dltensor" and took ownership.
void DeleteOutputCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: the consumer owns it
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

void Init(int64_t fusion_threshold_bytes, double cycle_time_ms, int64_t cache_capacity,
          std::optional<std::string> backend, uintptr_t mpi_comm) {
  dadt_init_options options;
  dadt_init_options_default(&options);
  options.fusion_threshold_bytes = fusion_threshold_bytes;
  options.cycle_time_ms = cycle_time_ms;
  options.cache_capacity = cache_capacity;
  options.backend = backend ? backend->c_str() : nullptr;
  options.mpi_comm = mpi_comm;
  int rc;
  {
    py::gil_scoped_release release;
    rc = dadt_init(&options);
  }
  CheckStatus(rc);
}

void Shutdown() {
  int rc;
  {
    py::gil_scoped_release release;
    rc = dadt_shutdown();
  }
  CheckStatus(rc);
}

py::object BackendName() {
  const char* name = dadt_backend_name();
  if (name == nullptr) return py::none();
  return py::str(name);
}

std::vector<std::string> BuiltBackends() {
  std::vector<std::string> names;
  const char* all = dadt_built_backends();
  std::string list = all ? all : "";
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) names.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

int64_t Enqueue(int op_type, const std::string& name, py::handle input, py::handle output,
                int reduce_op, double prescale, double postscale, int root_rank,
                std::optional<std::vector<int64_t>> splits, int64_t group_id, int group_size,
                uintptr_t stream, int staged_device, int32_t process_set_id,
                const std::vector<int32_t>& send_ranks, const std::vector<int32_t>& recv_ranks,
                bool withdraw) {
  const DLTensor* in = TensorFromCapsule(input, "input");
  const DLTensor* out = TensorFromCapsule(output, "output");
  dadt_op_desc desc;
  dadt_op_desc_default(&desc);
  desc.op_type = op_type;
  desc.name = name.c_str();
  desc.reduce_op = reduce_op;
  desc.prescale_factor = prescale;
  desc.postscale_factor = postscale;
  desc.root_rank = root_rank;
  desc.splits = splits ? splits->data() : nullptr;
  desc.num_splits = splits ? static_cast<int32_t>(splits->size()) : 0;
  desc.group_id = group_id;
  desc.group_size = group_size;
  desc.stream = stream;
  desc.staged_device = staged_device;
  desc.process_set_id = process_set_id;
  desc.send_ranks = send_ranks.data();
  desc.num_send_ranks = static_cast<int32_t>(send_ranks.size());
  desc.recv_ranks = recv_ranks.data();
  desc.num_recv_ranks = static_cast<int32_t>(recv_ranks.size());
  desc.withdraw = withdraw ? 1 : 0;
  int64_t handle;
  {
    py::gil_scoped_release release;
    handle = dadt_enqueue(&desc, in, out);
  }
  if (handle < 0) ThrowLastError();
  return handle;
}

// Process sets: a refusal (DADT_ERR_INVALID_ARGUMENT) raises ValueError with the runtime's
// message; any other failure raises CoreError.
[[noreturn]] void ThrowProcessSetError() {
  if (dadt_last_error_code() == DADT_ERR_INVALID_ARGUMENT) throw py::value_error(dadt_last_error());
  ThrowLastError();
}

int32_t AddProcessSet(const std::vector<int32_t>& ranks) {
  int32_t id = -1;
  int rc;
  {
    py::gil_scoped_release release;
    rc = dadt_add_process_set(ranks.data(), static_cast<int>(ranks.size()), &id);
  }
  if (rc != DADT_OK) ThrowProcessSetError();
  return id;
}

bool RemoveProcessSet(int32_t id) {
  int removed = 0;
  int rc;
  {
    py::gil_scoped_release release;
    rc = dadt_remove_process_set(id, &removed);
  }
  if (rc != DADT_OK) ThrowProcessSetError();
  return removed == 1;
}

std::vector<int32_t> ProcessSetIds() {
  const int n = dadt_process_set_ids(nullptr, 0);
  if (n < 0) ThrowLastError();
  std::vector<int32_t> ids(n);
  if (n > 0) dadt_process_set_ids(ids.data(), n);
  return ids;
}

std::vector<int32_t> ProcessSetRanks(int32_t id) {
  const int n = dadt_process_set_ranks(id, nullptr, 0);
  if (n < 0) ThrowProcessSetError();
  std::vector<int32_t> ranks(n);
  if (n > 0) dadt_process_set_ranks(id, ranks.data(), n);
  return ranks;
}

bool Poll(int64_t handle) {
  int rc = dadt_poll(handle);
  if (rc < 0) ThrowCoreError(DADT_ERR_INVALID_ARGUMENT, "unknown handle " + std::to_string(handle));
  return rc == 1;
}

void Wait(int64_t handle) {
  char message[4096] = {0};
  int rc;
  // Wait in slices so that Ctrl-C (SIGINT -> KeyboardInterrupt) interrupts a stuck synchronize.
  while (true) {
    {
      py::gil_scoped_release release;
      rc = dadt_wait_for(handle, 200, message, sizeof message);
    }
    if (rc != DADT_PENDING) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  message[sizeof message - 1] = '\0';
  if (rc == DADT_OK) return;
  const char* last = dadt_last_error();  // some failures set only the thread's last error
  ThrowCoreError(rc, message[0] ? message : (last && last[0] ? last : "collective failed"));
}

py::object TakeOutput(int64_t handle) {
  DLManagedTensor* managed = dadt_take_output(handle);
  if (managed == nullptr) return py::none();
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, DeleteOutputCapsule);
  if (capsule == nullptr) {
    if (managed->deleter != nullptr) managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

// A "dltensor" capsule over a C-contiguous object of the buffer protocol (a NumPy array, the
// read-only views of TensorFlow and JAX buffers included), made in C++ because NumPy's own
// __dlpack__ refuses read-only arrays and ml_dtypes' bfloat16. The caller gives the DLPack type
// (the buffer protocol has no code for bfloat16). The tensor holds the buffer, and so `obj`,
// until its deleter runs: the capsule's destructor, unless a consumer took the tensor.
struct BufferTensor {
  DLManagedTensor managed;
  Py_buffer view;
  std::vector<int64_t> shape;
};

void DeleteBufferTensor(DLManagedTensor* managed) {
  auto* tensor = static_cast<BufferTensor*>(managed->manager_ctx);
  PyGILState_STATE gil = PyGILState_Ensure();  // a consumer may free it on any thread
  PyBuffer_Release(&tensor->view);
  PyGILState_Release(gil);
  delete tensor;
}

py::object BufferCapsule(py::handle obj, int code, int bits, bool writable) {
  auto tensor = std::make_unique<BufferTensor>();
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &tensor->view, flags) != 0) throw py::error_already_set();
  const Py_buffer& view = tensor->view;
  if (bits <= 0 || view.itemsize * 8 != bits) {
    PyBuffer_Release(&tensor->view);
    throw py::value_error("buffer_capsule: items of " + std::to_string(view.itemsize) +
                          " bytes do not hold " + std::to_string(bits) + "-bit elements");
  }
  tensor->shape.assign(view.shape, view.shape + view.ndim);
  if (tensor->shape.empty()) tensor->shape.push_back(1);  // 0-d: a valid, unread pointer
  DLTensor& t = tensor->managed.dl_tensor;
  t.data = view.buf;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = view.ndim;
  t.dtype = DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  t.shape = tensor->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  tensor->managed.manager_ctx = tensor.get();
  tensor->managed.deleter = DeleteBufferTensor;
  PyObject* capsule = PyCapsule_New(&tensor->managed, kCapsuleName, DeleteOutputCapsule);
  if (capsule == nullptr) {
    PyBuffer_Release(&tensor->view);
    throw py::error_already_set();
  }
  tensor.release();  // owned by the capsule now
  return py::reinterpret_steal<py::object>(capsule);
}

std::vector<int64_t> ReceivedSplits(int64_t handle) {
  int n = dadt_handle_received_splits(handle, nullptr, 0);
  if (n < 0) ThrowCoreError(DADT_ERR_INVALID_ARGUMENT, "unknown handle " + std::to_string(handle));
  std::vector<int64_t> splits(n);
  if (n > 0) dadt_handle_received_splits(handle, splits.data(), n);
  return splits;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "dadt's runtime, bound over the C API in runtime/c_api.h (internal; use dadt.torch).";

  g_core_error = PyErr_NewExceptionWithDoc(
      "dadt._core.CoreError",
      "A failed runtime call: args (code, message); .code is a DADT_ERR_* value.",
      PyExc_RuntimeError, nullptr);
  if (g_core_error == nullptr) throw py::error_already_set();
  m.attr("CoreError") = py::reinterpret_borrow<py::object>(g_core_error);

  m.attr("OK") = DADT_OK;
  m.attr("ERR_INVALID_ARGUMENT") = DADT_ERR_INVALID_ARGUMENT;
  m.attr("ERR_MISMATCH") = DADT_ERR_MISMATCH;
  m.attr("ERR_PRECONDITION") = DADT_ERR_PRECONDITION;
  m.attr("ERR_ABORTED") = DADT_ERR_ABORTED;
  m.attr("ERR_TIMEOUT") = DADT_ERR_TIMEOUT;
  m.attr("ERR_UNIMPLEMENTED") = DADT_ERR_UNIMPLEMENTED;
  m.attr("ERR_INTERNAL") = DADT_ERR_INTERNAL;
  m.attr("ERR_REMOVED") = DADT_ERR_REMOVED;
  m.attr("OP_ALLREDUCE") = DADT_OP_ALLREDUCE;
  m.attr("OP_ALLGATHER") = DADT_OP_ALLGATHER;
  m.attr("OP_BROADCAST") = DADT_OP_BROADCAST;
  m.attr("OP_ALLTOALL") = DADT_OP_ALLTOALL;
  m.attr("OP_REDUCESCATTER") = DADT_OP_REDUCESCATTER;
  m.attr("OP_BARRIER") = DADT_OP_BARRIER;
  m.attr("OP_JOIN") = DADT_OP_JOIN;
  m.attr("OP_PEER_EXCHANGE") = DADT_OP_PEER_EXCHANGE;
  m.attr("OP_NEIGHBOR_ALLGATHER") = DADT_OP_NEIGHBOR_ALLGATHER;
  m.attr("WITHDRAW_SUFFIX") = DADT_WITHDRAW_SUFFIX;
  m.attr("REDUCE_AVERAGE") = DADT_REDUCE_AVERAGE;
  m.attr("REDUCE_SUM") = DADT_REDUCE_SUM;
  m.attr("REDUCE_ADASUM") = DADT_REDUCE_ADASUM;
  m.attr("REDUCE_MIN") = DADT_REDUCE_MIN;
  m.attr("REDUCE_MAX") = DADT_REDUCE_MAX;
  m.attr("REDUCE_PRODUCT") = DADT_REDUCE_PRODUCT;

  m.def("init", &Init, py::arg("fusion_threshold_bytes") = -1, py::arg("cycle_time_ms") = -1.0,
        py::arg("cache_capacity") = -1, py::arg("backend") = py::none(), py::arg("mpi_comm") = 0,
        "Starts the runtime; negative/None fields come from the environment (idempotent).");
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    if (dadt_start_timeline(path.c_str(), mark_cycles ? 1 : 0) != DADT_OK) ThrowLastError();
  }, py::arg("path"), py::arg("mark_cycles") = false, "Rank 0 starts writing the timeline.");
  m.def("stop_timeline", [] {
    if (dadt_stop_timeline() != DADT_OK) ThrowLastError();
  }, "Stops the timeline and closes its file.");
  m.def("set_fusion_params", [](int64_t fusion_threshold_bytes, double cycle_time_ms) {
    if (dadt_set_fusion_params(fusion_threshold_bytes, cycle_time_ms) != DADT_OK) ThrowLastError();
  }, py::arg("fusion_threshold_bytes") = -1, py::arg("cycle_time_ms") = -1.0,
        "Changes the fusion threshold / cycle time of the running job (negative: keep).");
  m.def("scatter_rows", [](int64_t rows, int size, int rank) {
    int64_t first_row = 0, count = 0;
    CheckStatus(dadt_scatter_rows(rows, size, rank, &first_row, &count));
    return py::make_tuple(first_row, count);
  }, py::arg("rows"), py::arg("size"), py::arg("rank"),
        "(first_row, count): `rank`'s rows of a reducescatter of `rows` rows over `size` ranks.");
  m.def("env_fusion_threshold", [] {
    int64_t bytes = 0;
    int is_set = 0;
    CheckStatus(dadt_env_fusion_threshold(&bytes, &is_set));
    return py::make_tuple(bytes, is_set != 0);
  }, "(bytes, is_set): DADT_FUSION_THRESHOLD as the runtime reads it, or (its default, False).");
  m.def("env_source", [](const std::string& name) { return std::string(dadt_env_source(name.c_str())); },
        py::arg("name"),
        "The variable that supplies the knob `name`: itself, or its HOROVOD_ alias when only that is set.");
  m.def("shutdown", &Shutdown, "Stops the runtime; pending handles fail with ERR_ABORTED.");
  m.def("is_initialized", [] { return dadt_is_initialized() != 0; });
  m.def("elastic_round", &dadt_elastic_round,
        "Elastic workers: the launcher's round this process joined last (0 before the first).");
  m.def("elastic_notice_at_init", &dadt_elastic_notice_at_init,
        "Elastic workers: the host-update notice number read with the round joined last.");
  m.def("elastic_updates", [] {
    int64_t round = 0, notice = 0;
    int rc;
    {
      py::gil_scoped_release release;  // one or two rendezvous round trips
      rc = dadt_elastic_updates(&round, &notice);
    }
    CheckStatus(rc);
    return py::make_tuple(round, notice);
  }, "Elastic workers: (latest round, latest notice number) in the launcher's store now.");
  m.def("elastic_notice", [] {
    int64_t round = 0, notice = 0;
    int rc;
    {
      py::gil_scoped_release release;
      rc = dadt_elastic_updates(&round, &notice);
    }
    CheckStatus(rc);
    return notice;
  }, "Elastic workers: the launcher's host-update notice number (elastic/notice) now.");
  m.def("elastic_notice_kind", [](int64_t seq) {
    const char* kind;
    {
      py::gil_scoped_release release;
      kind = dadt_elastic_notice_kind(seq);
    }
    if (kind == nullptr) ThrowLastError();
    return std::string(kind);
  }, py::arg("seq"), "Elastic workers: what notice `seq` changed: added, removed, mixed, or ''.");
  m.def("rank", &dadt_rank, "-1 when not initialized (as the other geometry calls).");
  m.def("size", &dadt_size);
  m.def("local_rank", &dadt_local_rank);
  m.def("local_size", &dadt_local_size);
  m.def("cross_rank", &dadt_cross_rank);
  m.def("cross_size", &dadt_cross_size);
  m.def("backend_name", &BackendName, "The data-plane backend in use, or None.");
  m.def("built_backends", &BuiltBackends, "Names of the backends built in.");
  m.def("mpi_threads_supported", &dadt_mpi_threads_supported,
        "1: MPI controller with MPI_THREAD_MULTIPLE, 0: not, -1: not initialized.");
  m.def("enqueue", &Enqueue, py::arg("op_type"), py::arg("name"), py::arg("input") = py::none(),
        py::arg("output") = py::none(), py::arg("reduce_op") = DADT_REDUCE_AVERAGE,
        py::arg("prescale") = 1.0, py::arg("postscale") = 1.0, py::arg("root_rank") = 0,
        py::arg("splits") = py::none(), py::arg("group_id") = -1, py::arg("group_size") = 0,
        py::arg("stream") = 0, py::arg("staged_device") = -1, py::arg("process_set_id") = 0,
        py::arg("send_ranks") = std::vector<int32_t>(), py::arg("recv_ranks") = std::vector<int32_t>(),
        py::arg("withdraw") = false,
        "Enqueues a collective on DLPack capsules (not consumed); returns its handle. GPU "
        "tensors: `stream` is the framework's current cudaStream_t; `staged_device` >= 0 marks a "
        "host copy of a tensor on that GPU. `process_set_id`: the set it runs in (0: global). "
        "Point to point (OP_PEER_EXCHANGE, OP_NEIGHBOR_ALLGATHER): `send_ranks`, `recv_ranks`; "
        "`withdraw` withdraws this rank's pending peer exchange of `name`.");
  m.def("add_process_set", &AddProcessSet, py::arg("ranks"),
        "Collective over the global set: registers the set of these global ranks, blocking (GIL "
        "released) until it is applied here; returns its id. ValueError for the coordinator's "
        "refusals (ranks disagree, bad or repeated rank, empty, duplicate set).");
  m.def("remove_process_set", &RemoveProcessSet, py::arg("process_set_id"),
        "Collective over the global set: True when the set was removed, False when it was not "
        "registered; ValueError for id 0.");
  m.def("process_set_ids", &ProcessSetIds, "The registered process set ids, ascending (0 first).");
  m.def("process_set_ranks", &ProcessSetRanks, py::arg("process_set_id"),
        "The set's global ranks, ascending; ValueError when it is not registered.");
  m.def("device_backend", [] {
    const char* name = dadt_device_backend();
    return name ? py::object(py::str(name)) : py::object(py::none());
  }, "The engine moving GPU tensors (\"nccl\"), or None: the front end stages them through host memory.");
  m.def("cuda_cast", [](py::handle input, py::handle output, uintptr_t stream) {
    const DLTensor* in = TensorFromCapsule(input, "input");
    const DLTensor* out = TensorFromCapsule(output, "output");
    int rc;
    {
      py::gil_scoped_release release;
      rc = dadt_cuda_cast(in, out, stream);
    }
    CheckStatus(rc);
  }, py::arg("input"), py::arg("output"), py::arg("stream"),
        "float32 <-> float16 of CUDA tensors with the runtime's kernel on `stream`.");
  m.def("cuda_copy_batch", [](const std::vector<uintptr_t>& src, const std::vector<uintptr_t>& dst,
                              const std::vector<int64_t>& bytes, uintptr_t stream) {
    if (src.size() != dst.size() || src.size() != bytes.size()) {
      throw py::value_error("cuda_copy_batch: src, dst and bytes must have the same length");
    }
    int rc;
    {
      py::gil_scoped_release release;
      rc = dadt_cuda_copy_batch(src.data(), dst.data(), bytes.data(), static_cast<int>(src.size()),
                                stream);
    }
    CheckStatus(rc);
  }, py::arg("src"), py::arg("dst"), py::arg("bytes"), py::arg("stream"),
        "Copies CUDA buffers (addresses; src 0 zero-fills) with the fusion copy kernel on `stream`, "
        "asynchronously (benchmark hook).");
  m.def("nccl_version", [] { return dadt_nccl_version(); },
        "The NCCL version code this build links (22807 for 2.28.7), 0 without NCCL.");
  m.def("cuda_available", [] {
    const bool ok = dadt_cuda_available() == 1;
    return py::make_tuple(ok, ok ? std::string() : std::string(dadt_last_error()));
  }, "(True, '') when this build has CUDA and sees a device; else (False, why).");
  m.def("choose_engines", [](std::optional<std::string> executor, bool mpi_comm) {
    const char *control = nullptr, *host = nullptr, *device = nullptr;
    CheckStatus(dadt_choose_engines(executor ? executor->c_str() : nullptr, mpi_comm ? 1 : 0,
                                    &control, &host, &device));
    return py::make_tuple(std::string(control), std::string(host), std::string(device));
  }, py::arg("executor") = py::none(), py::arg("mpi_comm") = false,
        "(control plane, host data plane, device data plane or '') that init(executor, comm) "
        "would run here, chosen as init chooses them; raises CoreError naming what cannot run.");
  m.def("poll", &Poll, py::arg("handle"), "True when the handle has completed.");
  m.def("wait", &Wait, py::arg("handle"),
        "Blocks (GIL released) until the handle completes; raises CoreError on failure.");
  m.def("take_output", &TakeOutput, py::arg("handle"),
        "The runtime-allocated output as a \"dltensor\" capsule (once), or None.");
  m.def("buffer_capsule", &BufferCapsule, py::arg("obj"), py::arg("code"), py::arg("bits"),
        py::arg("writable") = false,
        "A \"dltensor\" capsule over a C-contiguous buffer (read-only ones too) of DLPack type "
        "(code, bits); the capsule keeps obj alive.");
  m.def("int_result", &dadt_handle_int_result, py::arg("handle"),
        "Integer result of a completed handle (join: the last rank that joined).");
  m.def("received_splits", &ReceivedSplits, py::arg("handle"),
        "alltoall: rows received from each rank.");
  m.def("release", &dadt_release, py::arg("handle"), "Frees a handle.");
}
