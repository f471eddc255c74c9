#include "runtime/backends/engine_choice.h"

#include <algorithm>

namespace dadt {
namespace backends {
namespace {

struct Executor {
  const char* name;
  const char* needs;  // what it needs, for the refusal when this build lacks it
};

// The executor names of the original DADT API (init(all_reduce_executor=...)).
constexpr Executor kExecutors[] = {
    {"gloo", "the Gloo executor needs dadt built with Gloo"},
    {"mpi", "the MPI executor needs dadt built with MPI (Open MPI's libopenmpi-dev)"},
    {"mpicuda", "dadt has no CUDA-aware MPI path; GPU tensors go to NCCL ('nccl') or are staged "
                "through host memory"},
    {"nccl", "the NCCL executor needs dadt built with CUDA and NCCL (on wherever nvcc and NCCL "
             "are found at build time, docs/backends.md) and a GPU; this build has no NCCL "
             "support"},
};

bool Has(const std::vector<std::string>& built, const std::string& name) {
  return std::find(built.begin(), built.end(), name) != built.end();
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// Rule 3's refusals: an executor that is not one, or that this build lacks.
Status CheckExecutor(const std::string& executor, const std::vector<std::string>& built) {
  for (const Executor& e : kExecutors) {
    if (executor != e.name) continue;
    if (Has(built, executor)) return Status::OK();
    return InvalidArgument("executor '" + executor + "' is not available: " + e.needs +
                           "; this build of dadt has: " + Joined(built));
  }
  std::string known;
  for (const Executor& e : kExecutors) known += std::string(known.empty() ? "'" : ", '") + e.name + "'";
  return InvalidArgument("'" + executor + "' is not an executor; use one of " + known);
}

const char* EngineOf(ControlPlane plane) {
  return plane == ControlPlane::kMpi ? "mpi" : "gloo";
}

}  // namespace

const char* ControlPlaneName(ControlPlane plane) {
  return plane == ControlPlane::kMpi ? "mpi" : "tcp";
}

StatusOr<EngineChoice> ChooseEngines(const EngineRequest& request,
                                     const EngineEnvironment& environment,
                                     const std::vector<std::string>& built,
                                     const DeviceFacts& devices) {
  EngineChoice c;
  // 1. The control plane.
  const std::string& controller = environment.controller;
  if (!controller.empty() && controller != "gloo" && controller != "mpi") {
    return InvalidArgument("DADT_CONTROLLER must be 'gloo' or 'mpi', got '" + controller + "'");
  }
  const bool mpi_control = controller.empty() ? environment.under_mpirun : controller == "mpi";
  c.control_plane = mpi_control || request.mpi_comm ? ControlPlane::kMpi : ControlPlane::kTcpStar;
  if (request.mpi_comm && !Has(built, "mpi")) {
    return InvalidArgument("an MPI communicator (init(comm=...)) needs MPI: " +
                           std::string(kExecutors[1].needs));
  }
  // 2. The environment's device data plane.
  const bool nccl_built = Has(built, "nccl");
  std::string device = environment.device_data_plane.empty() ? (nccl_built ? "nccl" : "none")
                                                             : environment.device_data_plane;
  if (device == "none") device.clear();
  if (!device.empty() && !(device == "nccl" && nccl_built)) {
    return InvalidArgument("DADT_DEVICE_BACKEND must be 'none'" +
                           std::string(nccl_built ? " or 'nccl'" : " (this build has no NCCL)") +
                           ", got '" + environment.device_data_plane + "'");
  }
  // 3. The executor.
  const std::string& executor = request.executor;
  if (!executor.empty()) DADT_RETURN_IF_ERROR(CheckExecutor(executor, built));
  if (executor == "nccl") {
    if (devices.visible_gpus == 0) {
      return PreconditionFailed("the nccl executor needs a GPU: " + devices.why_none);
    }
    c.host_data_plane = EngineOf(c.control_plane);
    c.device_data_plane = "nccl";
  } else if (!executor.empty()) {
    c.host_data_plane = executor;  // GPU tensors staged through it
  } else {
    c.host_data_plane = request.mpi_comm ? "mpi" : EngineOf(c.control_plane);
    c.device_data_plane = device;
  }
  // 4. MPI as host data plane needs MPI as control plane; a lone process gets an MPI singleton.
  if (c.host_data_plane == "mpi" && c.control_plane == ControlPlane::kTcpStar) {
    if (environment.size == 1 && !environment.has_rendezvous) {
      c.control_plane = ControlPlane::kMpi;
    } else {
      return PreconditionFailed("the mpi executor needs MPI as the controller: launch the job "
                                "with `dadtrun --mpi` or `mpirun` (this one was started by "
                                "dadtrun --gloo)");
    }
  }
  // 5. One GPU per rank on this host, or GPU tensors are staged (unless "nccl" was asked for).
  if (c.device_data_plane == "nccl" && executor != "nccl" && devices.local_ranks > 0 &&
      devices.visible_gpus < devices.local_ranks) {
    c.device_data_plane.clear();
    if (devices.visible_gpus > 0) {
      c.staged_because = std::to_string(devices.visible_gpus) + " GPU(s) for " +
                         std::to_string(devices.local_ranks) +
                         " ranks on this host: GPU tensors are staged through host memory";
    }
  }
  return c;
}

}  // namespace backends
}  // namespace dadt
