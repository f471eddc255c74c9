// Every environment variable of the launcher -> worker contract and every tuning knob, in one place.
//
// dadtrun sets these for each rank; the runtime reads them at init. A dadtrun flag maps to exactly
// one of them (docs/running.md has the table). Helpers parse values with a clear error on junk.
// Knobs that Horovod has too are also read under Horovod's names (kHorovodAliases below):
//
//   setenv("HOROVOD_CYCLE_TIME", "5", 1);
//   env::GetDouble(env::kCycleTime, 1.0);   // 5.0 while DADT_CYCLE_TIME is unset
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace env {

// Launcher -> worker contract.
inline constexpr const char kRank[] = "DADT_RANK";
inline constexpr const char kSize[] = "DADT_SIZE";
inline constexpr const char kLocalRank[] = "DADT_LOCAL_RANK";
inline constexpr const char kLocalSize[] = "DADT_LOCAL_SIZE";
inline constexpr const char kCrossRank[] = "DADT_CROSS_RANK";
inline constexpr const char kCrossSize[] = "DADT_CROSS_SIZE";
inline constexpr const char kHostname[] = "DADT_HOSTNAME";
inline constexpr const char kController[] = "DADT_CONTROLLER";
inline constexpr const char kRendezvousAddr[] = "DADT_RENDEZVOUS_ADDR";
inline constexpr const char kRendezvousPort[] = "DADT_RENDEZVOUS_PORT";
inline constexpr const char kSecret[] = "DADT_SECRET";
inline constexpr const char kIface[] = "DADT_IFACE";
// Elastic mode (docs/elastic.md): geometry comes from the launcher's rounds, not from the above.
inline constexpr const char kElastic[] = "DADT_ELASTIC";                    // 1: elastic worker
inline constexpr const char kElasticWorkerId[] = "DADT_ELASTIC_WORKER_ID";  // host/slot/spawn seq
inline constexpr const char kElasticTimeout[] = "DADT_ELASTIC_TIMEOUT";     // seconds
inline constexpr int64_t kDefaultElasticTimeoutSeconds = 600;
// Where rank 0 writes each commit, read when no live worker holds one (dadt.common.elastic_checkpoint).
inline constexpr const char kElasticCheckpoint[] = "DADT_ELASTIC_CHECKPOINT";
// torchrun's names, so plain torch.distributed scripts run under dadtrun too.
inline constexpr const char kTorchRank[] = "RANK";
inline constexpr const char kTorchWorldSize[] = "WORLD_SIZE";
inline constexpr const char kTorchLocalRank[] = "LOCAL_RANK";
inline constexpr const char kTorchLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr const char kTorchMasterAddr[] = "MASTER_ADDR";
inline constexpr const char kTorchMasterPort[] = "MASTER_PORT";
// Set by Open MPI's mpirun for each rank: a plain `mpirun python train.py` uses MPI as controller.
inline constexpr const char kOmpiWorldSize[] = "OMPI_COMM_WORLD_SIZE";
// Set by the Hydra launchers (MPICH's and Intel MPI's mpiexec/mpirun) for each rank: a plain
// `mpiexec python train.py` uses MPI too, through dadt's MPICH-ABI build of the MPI engine.
inline constexpr const char kPmiRank[] = "PMI_RANK";
inline constexpr const char kPmiSize[] = "PMI_SIZE";
inline constexpr const char kHydraLocalRank[] = "MPI_LOCALRANKID";
inline constexpr const char kHydraLocalSize[] = "MPI_LOCALNRANKS";
// Set by dadtrun for each rank unless the user's environment already has them.
inline constexpr const char kOmpNumThreads[] = "OMP_NUM_THREADS";    // 1 when ranks share a host
inline constexpr const char kPythonUnbuffered[] = "PYTHONUNBUFFERED";  // 1, so lines show promptly
// glibc malloc: keep freed tensor memory instead of returning it to the kernel every step
// (dadtrun/worker_env.h says why). Left alone when the user sets either threshold or a
// glibc.malloc.* tunable.
inline constexpr const char kMallocMmapThreshold[] = "MALLOC_MMAP_THRESHOLD_";
inline constexpr const char kMallocTrimThreshold[] = "MALLOC_TRIM_THRESHOLD_";
inline constexpr const char kGlibcTunables[] = "GLIBC_TUNABLES";
inline constexpr int64_t kWorkerMmapThresholdBytes = int64_t{32} << 20;  // glibc's largest
inline constexpr int64_t kWorkerTrimThresholdBytes = int64_t{1} << 30;

// Tuning knobs.
inline constexpr const char kFusionThreshold[] = "DADT_FUSION_THRESHOLD";  // bytes
inline constexpr const char kCycleTime[] = "DADT_CYCLE_TIME";              // milliseconds
inline constexpr const char kCacheCapacity[] = "DADT_CACHE_CAPACITY";      // entries; 0 disables
inline constexpr const char kEagerThreshold[] = "DADT_EAGER_THRESHOLD";    // bytes; 0 disables
inline constexpr const char kHierarchicalAllreduce[] = "DADT_HIERARCHICAL_ALLREDUCE";
inline constexpr const char kStartTimeout[] = "DADT_START_TIMEOUT";        // seconds
inline constexpr const char kGlooTimeout[] = "DADT_GLOO_TIMEOUT_SECONDS";  // seconds per collective
inline constexpr const char kGlooSegmentBytes[] = "DADT_GLOO_SEGMENT_BYTES";  // 0 = engine default
inline constexpr const char kShmAllreduce[] = "DADT_SHM_ALLREDUCE";  // 0: Gloo's ring / MPI_Allreduce on one host too
inline constexpr const char kGlooThreads[] = "DADT_GLOO_THREADS";  // collectives in flight at once
inline constexpr int64_t kDefaultGlooThreads = 2;
inline constexpr const char kRealtimeThreads[] = "DADT_REALTIME_THREADS";  // 1: real-time
inline constexpr const char kLogLevel[] = "DADT_LOG_LEVEL";  // trace|debug|info|warning|error
inline constexpr const char kStallCheckTime[] = "DADT_STALL_CHECK_TIME_SECONDS";
inline constexpr const char kStallShutdownTime[] = "DADT_STALL_SHUTDOWN_TIME_SECONDS";
inline constexpr const char kStallCheckDisable[] = "DADT_STALL_CHECK_DISABLE";  // 1 = no stall check
// Liveness (runtime/core/liveness.h): seconds without a heartbeat before a rank is reported
// unresponsive (0 = off), and before the job ends; a file the survivors append their verdict to
// (dadtrun --mpi sets it: there is no rendezvous server to record it in).
inline constexpr const char kLivenessTimeout[] = "DADT_LIVENESS_TIMEOUT_SECONDS";
inline constexpr const char kLivenessShutdownTime[] = "DADT_LIVENESS_SHUTDOWN_TIME_SECONDS";
inline constexpr const char kLivenessReport[] = "DADT_LIVENESS_REPORT";
inline constexpr const char kAutotune[] = "DADT_AUTOTUNE";
inline constexpr const char kAutotuneLog[] = "DADT_AUTOTUNE_LOG";
inline constexpr const char kAutotuneWarmupSamples[] = "DADT_AUTOTUNE_WARMUP_SAMPLES";
inline constexpr const char kAutotuneStepsPerSample[] = "DADT_AUTOTUNE_STEPS_PER_SAMPLE";
inline constexpr const char kAutotuneMaxSamples[] = "DADT_AUTOTUNE_BAYES_OPT_MAX_SAMPLES";
inline constexpr const char kAutotuneNoise[] = "DADT_AUTOTUNE_GAUSSIAN_PROCESS_NOISE";
inline constexpr const char kTimeline[] = "DADT_TIMELINE";  // path of rank 0's trace file
// DADT_TIMELINE=DYNAMIC (Horovod's value): no file at init; start_timeline() starts one later.
inline constexpr const char kTimelineDynamic[] = "DYNAMIC";
inline constexpr const char kTimelineMarkCycles[] = "DADT_TIMELINE_MARK_CYCLES";
inline constexpr const char kDeviceBackend[] = "DADT_DEVICE_BACKEND";  // GPU tensors: nccl | none

// Defaults (Horovod's, where Horovod has one).
inline constexpr int64_t kDefaultFusionThresholdBytes = 128LL * 1024 * 1024;
inline constexpr double kDefaultCycleTimeMs = 1.0;
inline constexpr int64_t kDefaultCacheCapacity = 1024;
inline constexpr int64_t kDefaultEagerThresholdBytes = 32 * 1024;
inline constexpr int64_t kDefaultStartTimeoutSeconds = 30;
inline constexpr int64_t kDefaultGlooTimeoutSeconds = 300;
inline constexpr double kDefaultStallCheckTimeSeconds = 60.0;
inline constexpr double kDefaultLivenessTimeoutSeconds = 10.0;
inline constexpr double kDefaultLivenessShutdownTimeSeconds = 60.0;

// Horovod's names. A knob that Horovod has with the same meaning and units is also read under
// Horovod's name, so that a Horovod job's environment works unchanged: when the DADT_ name is unset
// or empty and the HOROVOD_ name is set, the HOROVOD_ value is taken; when both are set, the DADT_
// name wins. This table is the one place the rule lives: every reader of a knob goes through the
// getters below (the runtime, dadtrun, and the Python front ends through dadt_env_source), and the
// runtime names each alias taken in one line at init (HorovodAliasNotices). Horovod's variables
// that dadt has no knob for are not aliased; docs/api.md, "Differences from Horovod", lists them.
struct HorovodAlias {
  const char* dadt;     // DADT_FUSION_THRESHOLD
  const char* horovod;  // HOROVOD_FUSION_THRESHOLD
};
inline constexpr HorovodAlias kHorovodAliases[] = {
    {kFusionThreshold, "HOROVOD_FUSION_THRESHOLD"},  // bytes in both
    {kCycleTime, "HOROVOD_CYCLE_TIME"},              // milliseconds in both
    {kCacheCapacity, "HOROVOD_CACHE_CAPACITY"},
    {kHierarchicalAllreduce, "HOROVOD_HIERARCHICAL_ALLREDUCE"},
    {kStartTimeout, "HOROVOD_START_TIMEOUT"},  // seconds; dadtrun reads it as horovodrun does
    {kGlooTimeout, "HOROVOD_GLOO_TIMEOUT_SECONDS"},
    {kIface, "HOROVOD_GLOO_IFACE"},
    {kLogLevel, "HOROVOD_LOG_LEVEL"},
    {kStallCheckTime, "HOROVOD_STALL_CHECK_TIME_SECONDS"},
    {kStallShutdownTime, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
    {kStallCheckDisable, "HOROVOD_STALL_CHECK_DISABLE"},
    {kAutotune, "HOROVOD_AUTOTUNE"},
    {kAutotuneLog, "HOROVOD_AUTOTUNE_LOG"},
    {kAutotuneWarmupSamples, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES"},
    {kAutotuneStepsPerSample, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"},
    {kAutotuneMaxSamples, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"},
    {kAutotuneNoise, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"},
    {kTimeline, "HOROVOD_TIMELINE"},
    {kTimelineMarkCycles, "HOROVOD_TIMELINE_MARK_CYCLES"},
    {kElasticTimeout, "HOROVOD_ELASTIC_TIMEOUT"},  // seconds; dadtrun reads it as horovodrun does
};

// Horovod's name for the DADT_ variable `name`, or nullptr when it has none.
const char* HorovodAliasOf(const char* name);
// The variable that supplies `name`: `name` itself when it is set (non-empty), else its Horovod
// alias when that one is set, else `name`. The getters below read through it.
const char* Source(const char* name);
// The same rule over an environment held as a map (dadtrun's EnvMap, a child's environment): the
// value of `name` when set (non-empty), else of its Horovod alias when set, else "".
std::string LookupIn(const std::map<std::string, std::string>& env, const char* name);
// One line per alias in effect in this environment, in table order:
//   "HOROVOD_CYCLE_TIME=5 taken as DADT_CYCLE_TIME"            (only the Horovod name is set)
//   "HOROVOD_CYCLE_TIME=5 ignored: DADT_CYCLE_TIME=2 is set"   (both set, to different values)
// Empty when no Horovod name is set.
std::vector<std::string> HorovodAliasNotices();

// Returns the variable (or its Horovod alias: Source), or `fallback` when unset or empty.
std::string GetString(const char* name, const std::string& fallback = "");
bool IsSet(const char* name);
// Parse helpers: an unset variable gives `fallback`; a malformed one gives InvalidArgument
// naming the variable read (the DADT_ name or its Horovod alias) and the bad value.
StatusOr<int64_t> GetInt(const char* name, int64_t fallback);
StatusOr<double> GetDouble(const char* name, double fallback);
StatusOr<bool> GetBool(const char* name, bool fallback);

// DADT_FUSION_THRESHOLD (or HOROVOD_FUSION_THRESHOLD) in bytes: an integer >= 0, or `fallback`
// when unset or empty. The runtime (RuntimeOptions::FromEnv) and the front ends
// (dadt_env_fusion_threshold, which the Python training modes use for their bucket size) read the
// variable only through this function, so a value such as `1e6` is refused everywhere with the
// same message.
StatusOr<int64_t> GetFusionThreshold(int64_t fallback = kDefaultFusionThresholdBytes);

// The MPI launcher that started this process, as its variables say: Open MPI's mpirun
// (OMPI_COMM_WORLD_SIZE), a Hydra launcher (PMI_SIZE with MPI_LOCALNRANKS: MPICH's and Intel
// MPI's mpiexec/mpirun; Slurm's `srun --mpi=pmi2` sets PMI_SIZE alone and is not one), or none.
// Open MPI wins when both are set. Which dadt._core the Python package loads follows the same
// rule (frameworks/python/dadt/_mpi_abi.py: it must choose before any C++ is loaded).
enum class MpiLauncher { kNone, kOpenMpi, kHydra };
MpiLauncher DetectMpiLauncher();

// The path of the executable regular file `name` in the first directory of PATH that has one, as
// a shell finds it; "" when there is none (or PATH is unset). Empty PATH entries are skipped.
std::string FindOnPath(const std::string& name);

}  // namespace env
}  // namespace dadt
