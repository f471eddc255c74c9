// How the tasks of a Slurm step that `srun` started without dadtrun agree on one job secret when
// the user exported no DADT_SECRET: task 0 makes one and hands it, through munge, to the tasks
// that prove they run as its own user (dadtrun/slurm_task.h runs this; docs/running.md "The job
// secret").
//
// Protocol, over TCP at the step's port P on task 0's node (dadtrun/slurm.h DirectLaunchPort):
//  1. Task 0 makes a fresh secret (32 random bytes), starts the job's store with it on a free port,
//     checks that munge works for it, and listens on P.
//  2. Every other task k asks munge for a credential of "dadt-slurm-join step=J.S task=k", connects
//     to P (retrying until task 0 listens) and sends "DADT-JOIN J.S k\n" then "CRED <credential>\n",
//     or "NOCRED <munge's error>\n" when munge fails for it.
//  3. Task 0 decodes each credential with unmunge, which refuses a forged, expired (its TTL) or
//     replayed one. The credential must be made by task 0's own uid and name exactly that step and
//     task. A request for another step is answered with an error and does not count. A bad or
//     missing credential, or a second request for one task, fails the step: task 0 answers
//     "ERROR<TAB>why" to every task that asked and to each that asks until the time-out.
//  4. Once all size-1 tasks have asked, task 0 answers each with "SECRET <credential>\n": a munge
//     credential that only task 0's uid can decode, its payload encrypted, of
//     "dadt-slurm-secret step=J.S task=k port=<store port> secret=<hex>". A task that has not asked
//     within the time-out (DADT_START_TIMEOUT) fails the step the same way.
//  5. Task k decodes the answer: it must come from its own uid and name its step and task; then it
//     uses that secret and store port.
// So a process of another user can neither join (its credential names its uid) nor read the secret
// (it cannot decode the answer), and a process of another user answering at P in task 0's place is
// refused by each task (the answer's credential names that uid). The price: anyone who can reach P
// can make a step that is starting fail, by sending a request that names it.
//
//   StatusOr<JoinedStep> joined = JoinStepThroughMunge(env, task, "sn1", 24242);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "dadtrun/munge.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/slurm.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// What task 0 hands out; a non-empty `failure` is answered to every task instead.
struct SecretToHandOut {
  std::string secret;
  int store_port = 0;
  std::string failure;
};

// Task 0: answers the other tasks of `task`'s step on `listen_fd` (listening, non-blocking; the
// caller closes it) as steps 3-4 say, `uid` being its own. Returns once every task has its answer,
// or at the time-out; OK when all got the secret, else the failure they were told.
Status HandOutSecret(CredentialService& munge, const SlurmTask& task, uid_t uid, int listen_fd,
                     const SecretToHandOut& handout, std::chrono::milliseconds timeout);

struct JoinAnswer {
  std::string secret;
  int store_port = 0;
};

// Task k > 0: steps 2 and 5 against task 0 at addr:port. An error is task 0's answer, or says why
// this task could not ask (munge, no answer within the time-out) or refused the answer.
StatusOr<JoinAnswer> AskForSecret(CredentialService& munge, const SlurmTask& task, uid_t uid,
                                  const std::string& addr, int port,
                                  std::chrono::milliseconds timeout);

// The result for one task; `store` is set on task 0, which serves it.
struct JoinedStep {
  std::string secret;
  int store_port = 0;
  std::unique_ptr<RendezvousServer> store;
};

// The whole exchange as `dadtrun --slurm-task-env` runs it: munge's programs at the munged socket
// Slurm uses, this process's uid, DADT_START_TIMEOUT (default 30 s) as the time-out; task 0 listens
// on DADT_IFACE's address or every interface.
StatusOr<JoinedStep> JoinStepThroughMunge(const EnvMap& env, const SlurmTask& task,
                                          const std::string& addr, int port);

}  // namespace dadtrun
}  // namespace dadt
