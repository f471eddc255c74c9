/* dadt's stable C API: the only entry points that framework bindings use.
 *
 * One runtime per process. dadt_init starts it (reading the launcher's environment, see
 * docs/running.md), dadt_shutdown stops it. Collectives are asynchronous: dadt_enqueue returns a
 * handle at once; dadt_poll tests it, dadt_wait blocks until it completes (call it without
 * holding any interpreter lock), dadt_release frees it.
 *
 * Tensors cross as DLPack DLTensor views, compact row-major, in host memory (kDLCPU, kDLCUDAHost)
 * or, in the CUDA build, in GPU memory (kDLCUDA). GPU tensors go to the job's GPU engine (NCCL,
 * see dadt_device_backend), ordered after dadt_op_desc.stream; when the job has none, the front
 * end stages them through host memory (dadt_op_desc.staged_device). The caller keeps the memory of
 * `input` and `output` alive and untouched until the handle completes. Ops whose output size is
 * only known after negotiation (allgather, alltoall, reducescatter) allocate their result inside
 * the runtime (on the input's GPU for a GPU input), unless given an output (host memory only);
 * dadt_take_output hands it over as a DLManagedTensor the caller owns.
 *
 *   dadt_init_options o; dadt_init_options_default(&o);
 *   if (dadt_init(&o) != DADT_OK) fprintf(stderr, "%s\n", dadt_last_error());
 *   dadt_op_desc d; dadt_op_desc_default(&d);
 *   d.op_type = DADT_OP_ALLREDUCE; d.name = "grad.w"; d.reduce_op = DADT_REDUCE_SUM;
 *   int64_t h = dadt_enqueue(&d, &in, &out);
 *   char msg[1024]; int rc = dadt_wait(h, msg, sizeof msg); dadt_release(h);
 *
 * Error codes are the values of dadt::StatusCode. Every function is thread-safe.
 * ABI: structs carry a `struct_size` field first; new fields are only ever appended.
 */
#ifndef DADT_RUNTIME_C_API_H_
#define DADT_RUNTIME_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (dadt::StatusCode). */
#define DADT_OK 0
#define DADT_ERR_INVALID_ARGUMENT 1
#define DADT_ERR_MISMATCH 2
#define DADT_ERR_PRECONDITION 3
#define DADT_ERR_ABORTED 4
#define DADT_ERR_TIMEOUT 5
#define DADT_ERR_UNIMPLEMENTED 6
#define DADT_ERR_INTERNAL 7
#define DADT_ERR_REMOVED 8 /* elastic: the launcher removed this worker from the job */
#define DADT_PENDING (-2) /* dadt_wait_for: not done yet */

/* Op types (dadt::OpType). */
#define DADT_OP_ALLREDUCE 0
#define DADT_OP_ALLGATHER 1
#define DADT_OP_BROADCAST 2
#define DADT_OP_ALLTOALL 3
#define DADT_OP_REDUCESCATTER 4
#define DADT_OP_BARRIER 5
#define DADT_OP_JOIN 6
/* Point to point (dadt_op_desc.send_ranks / recv_ranks): a pairwise exchange the coordinator
 * matches between two ranks that name each other; a neighbor allgather over a graph. */
#define DADT_OP_PEER_EXCHANGE 9
#define DADT_OP_NEIGHBOR_ALLGATHER 10
/* What a withdrawal's name adds to the name of the exchange it withdraws (dadt_op_desc.withdraw). */
#define DADT_WITHDRAW_SUFFIX ".__withdraw__"

/* Reduce ops (dadt::ReduceOp), Horovod's numbering. */
#define DADT_REDUCE_AVERAGE 0
#define DADT_REDUCE_SUM 1
#define DADT_REDUCE_ADASUM 2
#define DADT_REDUCE_MIN 3
#define DADT_REDUCE_MAX 4
#define DADT_REDUCE_PRODUCT 5

typedef struct dadt_init_options {
  size_t struct_size;
  /* Each field left at its default (negative / NULL) is taken from the environment
   * (DADT_FUSION_THRESHOLD, DADT_CYCLE_TIME, DADT_CACHE_CAPACITY, DADT_CONTROLLER), then from
   * dadt's defaults. */
  int64_t fusion_threshold_bytes;
  double cycle_time_ms;
  int64_t cache_capacity;
  /* "gloo" or "mpi": the host executor, which then also carries GPU tensors (staged through host
   * memory); "nccl": GPU tensors go to NCCL (CUDA build and a GPU needed) while host tensors stay
   * on the controller's engine; NULL: from the environment (DADT_CONTROLLER, DADT_DEVICE_BACKEND). */
  const char* backend;
  /* An MPI_Comm cast to uintptr_t (e.g. mpi4py's MPI._handleof(comm)): the job is that
   * communicator's ranks, with MPI as controller and data plane. 0: from the environment. */
  uintptr_t mpi_comm;
} dadt_init_options;

typedef struct dadt_op_desc {
  size_t struct_size;
  int32_t op_type;
  /* Unique among this rank's in-flight ops; the same on every rank for the same collective. */
  const char* name;
  int32_t reduce_op;
  double prescale_factor;  /* allreduce/reducescatter: input multiplied before reducing (1.0) */
  double postscale_factor; /* output multiplied after reducing (1.0) */
  int32_t root_rank;       /* broadcast */
  const int64_t* splits;   /* alltoall: first-dim rows sent to each rank; NULL = equal split */
  int32_t num_splits;
  int64_t group_id;        /* grouped allreduce: same id on every member, -1 = none */
  int32_t group_size;      /* number of members of the group */
  /* GPU tensors (CUDA build): the framework's current stream (a cudaStream_t), which the runtime's
   * work is ordered after; 0 = the legacy default stream. */
  uintptr_t stream;
  /* >= 0: the framework tensor is on this CUDA device and the front end passes a host copy (the
   * job has no GPU data plane); negotiation then refuses ranks that pass a CPU tensor. -1: none. */
  int32_t staged_device;
  /* The process set the collective runs in (dadt_add_process_set); 0, the default, is the global
   * set. A broadcast's root_rank stays a global rank, which must be a member. */
  int32_t process_set_id;
  /* Point to point: the global ranks this rank sends its input to and receives into its output
   * from. Peer exchange: the coordinator pairs this rank with one of them that names it back
   * (send only: to one of send_ranks; receive only: from one of recv_ranks; both: a swap);
   * dadt_handle_int_result then gives the partner (-1: withdrawn). Neighbor allgather: sends to
   * all of send_ranks, receives recv_ranks' tensors into the output, concatenated in order. */
  const int32_t* send_ranks;
  int32_t num_send_ranks;
  const int32_t* recv_ranks;
  int32_t num_recv_ranks;
  /* Peer exchange: non-zero withdraws this rank's pending exchange named `name` minus its suffix
   * DADT_WITHDRAW_SUFFIX (no tensors): the pending one completes with partner -1 unless it was
   * matched already; the handle returned completes once the coordinator has seen the withdrawal. */
  int32_t withdraw;
} dadt_op_desc;

void dadt_init_options_default(dadt_init_options* options);
void dadt_op_desc_default(dadt_op_desc* desc);

/* Starts the runtime (idempotent: a second call while running returns DADT_OK). */
int dadt_init(const dadt_init_options* options);
/* Stops the runtime for every rank; pending handles complete with DADT_ERR_ABORTED (waits on them
 * keep answering until the next dadt_init). */
int dadt_shutdown(void);
int dadt_is_initialized(void);

/* Elastic workers (DADT_ELASTIC=1, docs/elastic.md): dadt_init joins the launcher's next round and
 * fails with DADT_ERR_REMOVED when that round removed this worker. The round last joined (0 before
 * the first) and the host-update notice number read with it; dadt_elastic_updates reads the
 * latest round and notice from the launcher's store now (DADT_ERR_PRECONDITION before a join). */
int64_t dadt_elastic_round(void);
int64_t dadt_elastic_notice_at_init(void);
int dadt_elastic_updates(int64_t* latest_round, int64_t* notice);
/* What host-update notice `seq` changed ("added", "removed", "mixed"; "" if there is none), valid
 * until this thread's next call. NULL on failure (dadt_last_error says why). */
const char* dadt_elastic_notice_kind(int64_t seq);
/* Message of the last failed call on this thread. */
const char* dadt_last_error(void);

/* Job geometry; -1 when not initialized. */
int dadt_rank(void);
int dadt_size(void);
int dadt_local_rank(void);
int dadt_local_size(void);
int dadt_cross_rank(void);
int dadt_cross_size(void);
/* Name of the data-plane backend ("gloo"), or NULL when not initialized. */
const char* dadt_backend_name(void);
/* Comma-separated names of the backends built in. */
const char* dadt_built_backends(void);
/* The engine that moves GPU tensors in this job ("nccl"), or NULL when the front end must stage
 * them through host memory (or dadt is not initialized). */
const char* dadt_device_backend(void);
/* The NCCL version code this build links (e.g. 22807 for 2.28.7), 0 without NCCL. Horovod's
 * nccl_built() returns it. */
int dadt_nccl_version(void);
/* 1 when this build has CUDA support and a CUDA device is visible; 0 otherwise, with the reason
 * in dadt_last_error(). */
int dadt_cuda_available(void);
/* What dadt_init would run, checked without starting anything: the engines for `executor` (as
 * dadt_init_options.backend; NULL: the environment's choice) and, when with_mpi_comm is 1, an MPI
 * communicator, chosen from the environment, the build and the visible GPUs exactly as dadt_init
 * chooses them (runtime/backends/engine_choice.h). Sets *control_plane ("tcp" or "mpi"),
 * *host_data_plane and *device_data_plane ("" when GPU tensors would be staged through host
 * memory), each valid until this thread's next call; DADT_OK, or an error naming what cannot run
 * (an unknown executor, one this build or machine lacks, MPI under a TCP launch). */
int dadt_choose_engines(const char* executor, int with_mpi_comm, const char** control_plane,
                        const char** host_data_plane, const char** device_data_plane);
/* fp16 compression of GPU tensors: casts `in` (float32 <-> float16) into `out` (same shape, same
 * GPU) with the runtime's kernel on the framework's `stream`; DADT_OK or an error code. */
int dadt_cuda_cast(const DLTensor* in, const DLTensor* out, uintptr_t stream);
/* Benchmark hook: copies `count` spans (src[i] -> dst[i], bytes[i] bytes; a null src zero-fills)
 * between CUDA buffers with the runtime's fusion copy kernel on `stream`, asynchronously, as the
 * runtime packs and unpacks its fusion buffer; DADT_OK or an error code. */
int dadt_cuda_copy_batch(const uintptr_t* src, const uintptr_t* dst, const int64_t* bytes, int count,
                         uintptr_t stream);
/* 1 when the job's controller is MPI and MPI granted MPI_THREAD_MULTIPLE; 0 otherwise; -1 when
 * not initialized. */
int dadt_mpi_threads_supported(void);

/* Rules the framework front ends must share with the runtime. Both need no running runtime. */
/* Rank `rank`'s share of a reducescatter over `size` ranks of a tensor whose first dimension has
 * `rows` rows, by the runtime's rule (rows / size each, one more for the first rows % size
 * ranks): its first row and its row count. DADT_OK, or DADT_ERR_INVALID_ARGUMENT (rows < 0,
 * size < 1, or rank outside [0, size)). */
int dadt_scatter_rows(int64_t rows, int size, int rank, int64_t* first_row, int64_t* count);
/* DADT_FUSION_THRESHOLD as dadt_init reads it: its value in bytes with *is_set = 1, or the
 * runtime's default (128 MiB) with *is_set = 0 when it is unset or empty. DADT_OK, or
 * DADT_ERR_INVALID_ARGUMENT when it is not an integer >= 0 (`1e6`, `-1`), with the message that
 * dadt_init gives in dadt_last_error(). */
int dadt_env_fusion_threshold(int64_t* bytes, int* is_set);
/* The environment variable that supplies the knob `name` (a DADT_ name), by the runtime's rule for
 * Horovod's names (runtime/common/env.h): `name` when it is set, else its HOROVOD_ alias when that
 * one is set, else `name`. Front ends that read a knob themselves read the variable named here.
 * The pointer is static (`name` itself or an entry of the alias table). */
const char* dadt_env_source(const char* name);

/* Timeline: rank 0 writes every tensor's phases to `path` as Chrome trace JSON (valid JSON at
 * every moment); other ranks return DADT_OK and do nothing. mark_cycles adds CYCLE_START marks. */
int dadt_start_timeline(const char* path, int mark_cycles);
int dadt_stop_timeline(void);

/* Changes the fusion threshold (bytes) and/or cycle time (ms) of the running job; a negative value
 * keeps that knob. Rank 0 applies them before its next negotiation round (only its coordinator
 * uses them); other ranks validate and return DADT_OK. Stops a running autotuner. */
int dadt_set_fusion_params(int64_t fusion_threshold_bytes, double cycle_time_ms);

/* Process sets (docs/process-sets.md). Adding and removing are collective over the global set:
 * every rank calls them in the same order with the same arguments; they block until the change
 * is applied on this rank (call them without holding any interpreter lock).
 * dadt_add_process_set: registers the set of `n` global ranks and writes its id. The
 * coordinator's refusals (ranks disagree, a rank outside the job or listed twice, empty, a set of
 * these ranks exists: "duplicate process set: ranks [...] are already process set N") are
 * DADT_ERR_INVALID_ARGUMENT on every rank.
 * dadt_remove_process_set: writes 1 when the set was removed, 0 when it was not registered;
 * DADT_ERR_INVALID_ARGUMENT for id 0. The set's pending collectives fail.
 * dadt_process_set_ids: the registered ids, ascending (0 first): copies min(n, count) and
 * returns the count (-1 when not initialized). dadt_process_set_ranks: the set's global ranks,
 * ascending, the same way; -1 (with dadt_last_error) when the set is not registered. */
int dadt_add_process_set(const int32_t* ranks, int n, int32_t* id);
int dadt_remove_process_set(int32_t id, int* removed);
int dadt_process_set_ids(int32_t* out, int n);
int dadt_process_set_ranks(int32_t id, int32_t* out, int n);

/* Enqueues a collective; returns a handle >= 0 or -1 (see dadt_last_error and
 * dadt_last_error_code). input: the tensor (NULL for barrier and join). output: allreduce and
 * broadcast write here (may be == input for in place); NULL for ops that allocate. Allgather and
 * reducescatter take an optional output (same dtype and dimensions but the first): the result is
 * written there, and a result of another size fails the collective; dadt_take_output is NULL. */
int64_t dadt_enqueue(const dadt_op_desc* desc, const DLTensor* input, const DLTensor* output);
int dadt_last_error_code(void);

/* 1 when done, 0 when pending, -1 for an unknown handle. */
int dadt_poll(int64_t handle);
/* Blocks until done. Returns the status code; on error copies the message into msg. */
int dadt_wait(int64_t handle, char* msg, size_t msg_len);
/* Like dadt_wait, but returns DADT_PENDING when `timeout_ms` passes first (timeout_ms < 0 waits
 * forever). Lets a binding wake up to check for Ctrl-C. */
int dadt_wait_for(int64_t handle, int64_t timeout_ms, char* msg, size_t msg_len);
/* Runtime-allocated output of a completed handle (once); NULL if none. Caller calls deleter. */
DLManagedTensor* dadt_take_output(int64_t handle);
/* Integer result of a completed handle: join -> the last rank that joined. */
int64_t dadt_handle_int_result(int64_t handle);
/* alltoall: rows received from each rank; copies min(n, size) values, returns size. */
int dadt_handle_received_splits(int64_t handle, int64_t* out, int n);
void dadt_release(int64_t handle);

#ifdef __cplusplus
}
#endif

#endif /* DADT_RUNTIME_C_API_H_ */
