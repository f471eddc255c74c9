#include "runtime/backends/mpi/mpi_env.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "runtime/backends/mpi/mpi_error.h"
#include "runtime/common/env.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace {

std::mutex g_init_mu;

// What JobComm keeps on a job communicator (an MPI attribute's value).
struct CommCache {
  // (purpose, -1): a duplicate; (purpose + " " + group, color): a split of one.
  std::map<std::pair<std::string, int>, MPI_Comm> comms;
  bool has_geometry = false;
  JobGeometry geometry;
};

std::mutex g_cache_mu;  // guards g_cache_key, g_finalize_key and every CommCache
int g_cache_key = MPI_KEYVAL_INVALID;
int g_finalize_key = MPI_KEYVAL_INVALID;  // MPI_COMM_SELF's: runs first in MPI_Finalize

std::mutex g_bases_mu;           // guards g_bases (not g_cache_mu: MPI calls the callbacks)
std::set<MPI_Comm> g_bases;      // the communicators that hold a cache

// Runs when the job communicator is freed, or from FreeAllAtFinalize.
int DeleteCommCache(MPI_Comm comm, int /*key*/, void* value, void* /*extra*/) {
  auto* cache = static_cast<CommCache*>(value);
  for (auto& entry : cache->comms) MPI_Comm_free(&entry.second);
  delete cache;
  std::lock_guard<std::mutex> lock(g_bases_mu);
  g_bases.erase(comm);
  return MPI_SUCCESS;
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works: the moment to
// free what is cached on MPI_COMM_WORLD and on user communicators still alive (MPI would not,
// and a leak checker would report them).
int FreeAllAtFinalize(MPI_Comm /*self*/, int /*key*/, void* /*value*/, void* /*extra*/) {
  std::set<MPI_Comm> bases;
  {
    std::lock_guard<std::mutex> lock(g_bases_mu);
    bases = g_bases;
  }
  for (MPI_Comm base : bases) MPI_Comm_delete_attr(base, g_cache_key);
  MPI_Comm_free_keyval(&g_cache_key);
  MPI_Comm_free_keyval(&g_finalize_key);
  return MPI_SUCCESS;
}

Status NotAMember(const std::string& purpose) {
  return InvalidArgument("the communicator given for the " + purpose +
                         " is MPI_COMM_NULL (this process is not a member)");
}

// The cache on `base`, attached on first use. Caller holds g_cache_mu.
StatusOr<CommCache*> CacheOf(MPI_Comm base) {
  if (g_cache_key == MPI_KEYVAL_INVALID) {
    DADT_MPI_CHECK("create_keyval", MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN,
                                                           &DeleteCommCache, &g_cache_key,
                                                           nullptr));
    DADT_MPI_CHECK("create_keyval", MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN,
                                                           &FreeAllAtFinalize, &g_finalize_key,
                                                           nullptr));
    DADT_MPI_CHECK("set_attr", MPI_Comm_set_attr(MPI_COMM_SELF, g_finalize_key, nullptr));
  }
  void* value = nullptr;
  int found = 0;
  DADT_MPI_CHECK("get_attr", MPI_Comm_get_attr(base, g_cache_key, &value, &found));
  if (found) return static_cast<CommCache*>(value);
  auto* cache = new CommCache;
  Status s = DADT_MPI_STATUS("set_attr", MPI_Comm_set_attr(base, g_cache_key, cache));
  if (!s.ok()) {
    delete cache;
    return s;
  }
  std::lock_guard<std::mutex> lock(g_bases_mu);
  g_bases.insert(base);
  return cache;
}

// JobComm's body; caller holds g_cache_mu.
StatusOr<MPI_Comm> JobCommLocked(uintptr_t native_comm, const std::string& purpose,
                                 CommCache** cache_out) {
  const MPI_Comm base = CommFromNative(native_comm);
  if (base == MPI_COMM_NULL) return NotAMember(purpose);
  CommCache* cache = nullptr;
  DADT_ASSIGN_OR_RETURN(cache, CacheOf(base));
  if (cache_out != nullptr) *cache_out = cache;
  auto it = cache->comms.find({purpose, -1});
  if (it != cache->comms.end()) return it->second;
  MPI_Comm dup = MPI_COMM_NULL;
  DADT_ASSIGN_OR_RETURN(dup, DupComm(native_comm, purpose.c_str()));
  cache->comms[{purpose, -1}] = dup;
  return dup;
}

// A handle from its integer form and back: a pointer under Open MPI's ABI, an int under MPICH's.
// Templates, so that only the branch of this build's ABI is compiled.
template <typename Handle>
Handle HandleFromNative(uintptr_t native) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<Handle>(native);
  } else {
    return static_cast<Handle>(native);
  }
}

template <typename Handle>
uintptr_t NativeFromHandle(Handle handle) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<uintptr_t>(handle);
  } else {
    return static_cast<uintptr_t>(handle);
  }
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

MPI_Comm CommFromNative(uintptr_t native_comm) {
  if (native_comm == 0) return MPI_COMM_WORLD;
  return HandleFromNative<MPI_Comm>(native_comm);
}

uintptr_t NativeFromComm(MPI_Comm comm) { return NativeFromHandle(comm); }

const char* BuiltAbi() {
#if defined(OPEN_MPI)
  return "Open MPI";
#else
  return "MPICH";
#endif
}

Status CheckLauncherMatchesAbi() {
  const env::MpiLauncher launcher = env::DetectMpiLauncher();
#if defined(OPEN_MPI)
  if (launcher != env::MpiLauncher::kHydra) return Status::OK();
  return PreconditionFailed(
      "this process was started by a Hydra launcher (MPICH's or Intel MPI's mpiexec/mpirun: "
      "PMI_RANK=" + env::GetString(env::kPmiRank) + ", PMI_SIZE=" + env::GetString(env::kPmiSize) +
      "), but this dadt._core's MPI engine is built for Open MPI "
      "(libmpi.so.40), which cannot join that job. dadt's Python package loads its MPICH-ABI build "
      "(dadt/_mpich/_core.so) under such a launcher unless DADT_MPI_ABI=openmpi: unset "
      "DADT_MPI_ABI, install dadt with `pip install .` (a bare _core.so symlink has no MPICH-ABI "
      "build), or launch with Open MPI's mpirun or dadtrun");
#else
  if (launcher != env::MpiLauncher::kOpenMpi) return Status::OK();
  return PreconditionFailed(
      "this process was started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=" +
      env::GetString(env::kOmpiWorldSize) + "), but this dadt._core's MPI engine is the MPICH-ABI "
      "build (libmpi.so.12: MPICH, Intel MPI), which cannot join that job. Unset DADT_MPI_ABI "
      "(or set it to openmpi) so that dadt loads its Open MPI build, or launch with MPICH's or "
      "Intel MPI's mpiexec");
#endif
}

bool IsInitialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

StatusOr<int> EnsureInitialized() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return PreconditionFailed("MPI has already been finalized in this process; dadt cannot use it");
  }
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    DADT_RETURN_IF_ERROR(CheckLauncherMatchesAbi());
    DADT_MPI_CHECK("init", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(&FinalizeAtExit);  // runs after the interpreter's own exit handlers
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return PreconditionFailed("MPI was initialised with " + ThreadLevelName(provided) +
                              "; dadt makes MPI calls from its own thread and needs at least "
                              "MPI_THREAD_SERIALIZED (initialise MPI with MPI_THREAD_MULTIPLE, "
                              "as mpi4py does by default)");
  }
  return provided;
}

StatusOr<MPI_Comm> DupComm(uintptr_t native_comm, const char* purpose) {
  const MPI_Comm base = CommFromNative(native_comm);
  if (base == MPI_COMM_NULL) return NotAMember(purpose);
  MPI_Comm dup = MPI_COMM_NULL;
  DADT_MPI_CHECK(purpose, MPI_Comm_dup(base, &dup));
  DADT_MPI_CHECK(purpose, MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  return dup;
}

StatusOr<MPI_Comm> JobComm(uintptr_t native_comm, const std::string& purpose) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return JobCommLocked(native_comm, purpose, nullptr);
}

StatusOr<MPI_Comm> JobSubComm(uintptr_t native_comm, const std::string& purpose,
                              const std::string& group_name, int color) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  CommCache* cache = nullptr;
  MPI_Comm parent = MPI_COMM_NULL;
  DADT_ASSIGN_OR_RETURN(parent, JobCommLocked(native_comm, purpose, &cache));
  const std::pair<std::string, int> key{purpose + " " + group_name, color};
  auto it = cache->comms.find(key);
  if (it != cache->comms.end()) return it->second;
  int rank = 0;
  DADT_MPI_CHECK("comm_rank", MPI_Comm_rank(parent, &rank));
  MPI_Comm group = MPI_COMM_NULL;
  DADT_MPI_CHECK("split", MPI_Comm_split(parent, color, rank, &group));
  Status s = DADT_MPI_STATUS("set_errhandler", MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
  if (!s.ok()) {
    MPI_Comm_free(&group);
    return s;
  }
  cache->comms[key] = group;
  return group;
}

StatusOr<JobGeometry> JobGeometryOf(uintptr_t native_comm) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  CommCache* cache = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  DADT_ASSIGN_OR_RETURN(comm, JobCommLocked(native_comm, "controller", &cache));
  if (!cache->has_geometry) {
    DADT_ASSIGN_OR_RETURN(cache->geometry, Geometry(comm));
    cache->has_geometry = true;
  }
  return cache->geometry;
}

StatusOr<JobGeometry> Geometry(MPI_Comm comm) {
  JobGeometry g;
  DADT_MPI_CHECK("comm_rank", MPI_Comm_rank(comm, &g.rank));
  DADT_MPI_CHECK("comm_size", MPI_Comm_size(comm, &g.size));
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  DADT_MPI_CHECK("split_type", MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, g.rank,
                                                   MPI_INFO_NULL, &local));
  Status s = DADT_MPI_STATUS("comm_rank", MPI_Comm_rank(local, &g.local_rank));
  if (s.ok()) s = DADT_MPI_STATUS("comm_size", MPI_Comm_size(local, &g.local_size));
  if (s.ok()) s = DADT_MPI_STATUS("split", MPI_Comm_split(comm, g.local_rank, g.rank, &cross));
  if (s.ok()) s = DADT_MPI_STATUS("comm_rank", MPI_Comm_rank(cross, &g.cross_rank));
  if (s.ok()) s = DADT_MPI_STATUS("comm_size", MPI_Comm_size(cross, &g.cross_size));
  if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
  MPI_Comm_free(&local);
  if (!s.ok()) return s;
  return g;
}

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
