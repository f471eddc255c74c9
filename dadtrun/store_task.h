// dadtrun's hidden mode that lets a rank started by another launcher serve its job's rendezvous
// store (dadtrun/rendezvous_server.h) for as long as that rank lives, and the helpers it shares
// with the Slurm step's rank 0 (dadtrun/slurm_task.h).
//
// `dadtrun --serve-store` is how dadt's init() under torchrun, or in the pods of a PyTorchJob,
// starts the store on the job's rank 0 (frameworks/python/dadt/common/torchrun.py, docs/running.md
// "torchrun and Kubernetes"). The job secret is DADT_SECRET from its environment (at least
// kMinSecretLength characters; the rank generates it), the port DADT_RENDEZVOUS_PORT or, unset,
// an ephemeral one; it listens on every interface (or DADT_IFACE's address). On stdout it prints
// "DADT_RENDEZVOUS_PORT=<port>" and then READY, and serves until its standard input closes (the
// rank that started it has exited) or it gets SIGTERM. A store that cannot start prints one line
// "ERROR<TAB>message" instead and exits 2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dadtrun/rendezvous_server.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

inline constexpr const char* kServeStoreFlag = "--serve-store";

// Shorter secrets are refused: anyone on the nodes could guess them.
inline constexpr size_t kMinSecretLength = 16;

// Prints "ERROR<TAB>message" (newlines flattened) for the rank that reads our stdout; returns 2.
int PrintTaskError(const std::string& message);

// The address a task's listener binds: DADT_IFACE's address when `env` names one, else every
// interface ("0.0.0.0"; not the address the host's own name resolves to: many images map it to
// 127.0.1.1). An unknown interface is InvalidArgument naming DADT_IFACE.
StatusOr<std::string> TaskBindAddress(const EnvMap& env);

// Starts the store on `port` (0: ephemeral) of TaskBindAddress(env). The secret guards the store.
StatusOr<std::unique_ptr<RendezvousServer>> StartTaskStore(const EnvMap& env,
                                                           const std::string& secret, int port);

// Returns once the rank that started us is gone: our stdin pipe closes, or SIGTERM/SIGINT/SIGHUP.
// Points stdout at /dev/null first, so that the rank reading it to its end sees the end.
void ServeUntilParentExits();

// main()'s exit code: 0 once it has stopped serving, 2 after ERROR.
int RunServeStore();

}  // namespace dadtrun
}  // namespace dadt
