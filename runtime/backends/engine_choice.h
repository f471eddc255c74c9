// Engine choice: which engines a rank runs, decided in one place by one pure function.
//
// A rank runs three engines, and each has a name here that says what it does:
//  - the control plane carries negotiation (who submitted what): dadt's own TCP star over the
//    launcher's rendezvous (backends/tcp/tcp_control_transport.h; spelled "gloo" in DADT_CONTROLLER for
//    historical reasons, although it is not Gloo), or MPI messages;
//  - the host data plane runs the collectives on host tensors: the "gloo" or "mpi" engine;
//  - the device data plane runs the collectives on GPU tensors: "nccl", or none (GPU tensors are
//    then staged through host memory and the host data plane).
// ChooseEngines maps what was asked (init()'s executor, an MPI communicator), what the launcher's
// environment says, what this build has and which GPUs this process sees to those three. It reads
// nothing itself (no environment, no devices), so every rule is covered by a table test
// (test/runtime/backends/engine_choice_test.cc). Its callers: RuntimeOptions::FromEnv (the
// environment alone, to refuse junk early), core/engine_setup.cc (the job's engines, once before
// connecting and once when the geometry is known) and dadt_choose_engines in the C API, through
// which the Python front ends check init()'s arguments.
//
//   auto choice = ChooseEngines(request, environment, BackendRegistry::Names(), devices);
//   if (!choice.ok()) return choice.status();  // names what cannot run, and why
//   Connect(choice->control_plane, choice->host_data_plane, choice->device_data_plane);
#pragma once

#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace backends {

// What the program asked for: init(all_reduce_executor=...) / dadt_init_options.
struct EngineRequest {
  // "gloo", "mpi", "nccl" (GPU tensors on NCCL, host tensors on the control plane's engine) or
  // "mpicuda" (never built); empty: the launcher's choice.
  std::string executor;
  bool mpi_comm = false;  // init(comm=...): an MPI communicator was given
};

// What the launcher's environment says (runtime/common/env.h); empty strings are unset.
struct EngineEnvironment {
  std::string controller;         // DADT_CONTROLLER: "gloo" (the TCP star) or "mpi"
  std::string device_data_plane;  // DADT_DEVICE_BACKEND: "nccl" or "none"
  // An MPI launcher's variables (env::DetectMpiLauncher: Open MPI's mpirun, or MPICH's or Intel
  // MPI's Hydra mpiexec/mpirun) set and DADT_RANK not: a plain mpirun
  bool under_mpirun = false;
  bool has_rendezvous = false;    // DADT_RENDEZVOUS_ADDR set: dadtrun's rendezvous server
  int size = 1;                   // ranks in the job as the environment says
};

// The GPUs this process sees.
struct DeviceFacts {
  int visible_gpus = 0;
  std::string why_none;  // why there are none, when there are none
  // Ranks on this host; 0 while unknown (an MPI control plane learns it when it connects), and
  // then GPU tensors are not yet staged for want of GPUs.
  int local_ranks = 0;
};

enum class ControlPlane { kTcpStar, kMpi };

struct EngineChoice {
  ControlPlane control_plane = ControlPlane::kTcpStar;
  std::string host_data_plane = "gloo";  // a BackendRegistry name
  std::string device_data_plane;         // a BackendRegistry name, or empty: staged through host
  // Why GPU tensors are staged although a device data plane was on offer (fewer GPUs than ranks
  // on this host); empty otherwise. For the log.
  std::string staged_because;

  bool operator==(const EngineChoice& o) const {
    return control_plane == o.control_plane && host_data_plane == o.host_data_plane &&
           device_data_plane == o.device_data_plane;
  }
};

// "tcp" or "mpi" (what the logs and dadt_choose_engines call the control plane).
const char* ControlPlaneName(ControlPlane plane);
// The ControlTransportRegistry name of an MPI control plane; the TCP star is core's own.
inline constexpr const char kMpiControlTransport[] = "mpi";

// The rules, in order:
//  1. Control plane: DADT_CONTROLLER ("gloo": the TCP star, or "mpi"; anything else is refused);
//     unset, MPI under plain mpirun and the TCP star otherwise; an MPI communicator means MPI.
//  2. Device data plane from the environment: DADT_DEVICE_BACKEND ("nccl" when built, "none"),
//     unset: "nccl" when built.
//  3. The executor: refused when unknown or not built (naming what it needs), "nccl" refused
//     without a GPU; "nccl" puts GPU tensors on NCCL and host tensors on the control plane's
//     engine; "gloo"/"mpi" run every tensor on that engine (GPU tensors staged); none: the
//     control plane's engine (MPI with a communicator) and the environment's device data plane.
//  4. A lone process (size 1, no rendezvous) asking for MPI on the TCP star becomes an MPI
//     singleton; otherwise the MPI host data plane needs the MPI control plane (refused).
//  5. With fewer GPUs than ranks on this host, GPU tensors are staged through host memory,
//     unless the executor "nccl" was asked for by name.
// Errors: InvalidArgument for names (unknown, not built), PreconditionFailed for what this
// launch or machine lacks.
StatusOr<EngineChoice> ChooseEngines(const EngineRequest& request,
                                     const EngineEnvironment& environment,
                                     const std::vector<std::string>& built,
                                     const DeviceFacts& devices);

}  // namespace backends
}  // namespace dadt
