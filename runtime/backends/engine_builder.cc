#include "runtime/backends/engine_builder.h"

#include "runtime/backends/hierarchical_allreduce.h"
#include "runtime/common/logging.h"

namespace dadt {
namespace backends {
namespace {

StatusOr<std::unique_ptr<Backend>> WithHierarchy(const std::string& engine,
                                                 std::unique_ptr<Backend> flat,
                                                 const BackendOptions& bo) {
  if (bo.local_size <= 1 || bo.cross_size <= 1 || bo.size != bo.local_size * bo.cross_size) {
    if (bo.rank == 0) {
      DADT_LOG(INFO) << "hierarchical allreduce needs several hosts with the same number of ranks "
                     << "(local size " << bo.local_size << ", cross size " << bo.cross_size
                     << ", size " << bo.size << "); using the flat allreduce";
    }
    return flat;
  }
  BackendOptions local = bo, cross = bo;
  static_cast<JobGeometry&>(local) = JobGeometry{bo.local_rank, bo.local_size, bo.local_rank,
                                                 bo.local_size, 0, 1};
  local.store_prefix = bo.store_prefix + "local/" + std::to_string(bo.cross_rank) + "/";
  local.group_color = bo.cross_rank;
  static_cast<JobGeometry&>(cross) = JobGeometry{bo.cross_rank, bo.cross_size, 0, 1,
                                                 bo.cross_rank, bo.cross_size};
  cross.store_prefix = bo.store_prefix + "cross/" + std::to_string(bo.local_rank) + "/";
  cross.group_color = bo.local_rank;
  auto local_backend = BackendRegistry::Create(engine, local);
  if (!local_backend.ok()) return local_backend.status();
  auto cross_backend = BackendRegistry::Create(engine, cross);
  if (!cross_backend.ok()) return cross_backend.status();
  if (bo.rank == 0) {
    DADT_LOG(INFO) << "hierarchical allreduce over " << bo.cross_size << " hosts of "
                   << bo.local_size << " ranks";
  }
  return std::unique_ptr<Backend>(new HierarchicalAllreduce(
      std::move(flat), std::move(*local_backend), std::move(*cross_backend), bo.local_rank,
      bo.local_size));
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateDataPlane(const std::string& engine,
                                                   const BackendOptions& options,
                                                   bool hierarchical) {
  auto backend = BackendRegistry::Create(engine, options);
  if (!backend.ok() || !hierarchical) return backend;
  return WithHierarchy(engine, std::move(*backend), options);
}

}  // namespace backends
}  // namespace dadt
