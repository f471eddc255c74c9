// LaunchElastic: runs an elastic dadtrun job (docs/elastic.md): the rendezvous server for the whole
// job, the discovery script (first run here: a failure ends the launch; then every second on a
// thread), and the ElasticDriver, whose hooks start workers here or over ssh exactly as a normal
// launch starts ranks, each with its own output prefix "[<worker id>]".
//
//   if (config.elastic.enabled) return LaunchElastic(config);
#pragma once

#include <string>

#include "dadtrun/cli.h"
#include "dadtrun/elastic_driver.h"
#include "dadtrun/worker_env.h"

namespace dadt {
namespace dadtrun {

// A worker's environment: WorkerEnvironment's, less everything that depends on a rank (DADT_RANK,
// DADT_SIZE, DADT_LOCAL_*, DADT_CROSS_*, and torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_*, ROLE_*, MASTER_ADDR, MASTER_PORT), which each round assigns; plus
// DADT_ELASTIC=1, DADT_ELASTIC_WORKER_ID, DADT_ELASTIC_TIMEOUT, DADT_CONTROLLER=gloo and
// DADT_HOSTNAME (the worker's host). OMP_NUM_THREADS=1 when several workers share the host and the
// user has not set it.
EnvMap ElasticWorkerEnvironment(const LaunchConfig& config, const JobEndpoints& endpoints, const EnvMap& user_env,
                                const ElasticWorkerSpec& worker);

// Exit code as Launch (launcher.h), and ElasticDriver::Run's.
int LaunchElastic(const LaunchConfig& config);

}  // namespace dadtrun
}  // namespace dadt
