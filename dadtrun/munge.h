// MUNGE credentials for dadtrun: how the tasks of a Slurm step prove to each other which user runs
// them (dadtrun/slurm_join.h), through the `munge` and `unmunge` programs of the munge package that
// every Slurm node with auth/munge has.
//
// A credential carries its payload, the uid and gid of the process that made it and a time; munged
// seals it with the cluster's shared key, so no process can forge one for another uid, and refuses
// to decode one twice on a node (replay) or after its time-to-live. A credential restricted to a
// uid is decoded only for that uid, and the payload is encrypted, so it can cross the network.
//
// CredentialService is the seam: MungeCli runs the programs; the tests give each simulated task a
// fake that encodes its own uid.
//
//   std::unique_ptr<CredentialService> munge = MungeCli(MungeSocketForSlurm(env));
//   StatusOr<std::string> cred = munge->Encode("hello", /*restrict_uid=*/std::nullopt);
//   StatusOr<MungeDecoded> got = munge->Decode(*cred);  // got->uid, got->payload
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct MungeDecoded {
  uid_t uid = 0;        // the uid of the process that encoded it
  std::string payload;
};

// Thread-compatible: one instance per thread.
class CredentialService {
 public:
  virtual ~CredentialService() = default;
  // A credential (one line of text) for `payload`; with `restrict_uid`, only processes of that uid
  // can decode it. The error says why munge could not make one (munged not running, no program).
  virtual StatusOr<std::string> Encode(const std::string& payload,
                                       std::optional<uid_t> restrict_uid) = 0;
  // A valid credential's payload and maker; an invalid, expired, replayed or not-for-us one is an
  // error with munge's reason.
  virtual StatusOr<MungeDecoded> Decode(const std::string& credential) = 0;
};

// The munge/unmunge programs from PATH, talking to munged at `socket` ("" = munge's default). The
// payload and the credential go through their stdin, never their command line.
std::unique_ptr<CredentialService> MungeCli(std::string socket);

// The munged socket Slurm itself uses: AuthInfo's "socket=" in `conf_text` (slurm.conf), or "".
std::string SlurmAuthInfoSocket(const std::string& conf_text);

// SlurmAuthInfoSocket of the file SLURM_CONF names in `env` (else /etc/slurm/slurm.conf); "" when
// the file is unreadable or sets no socket.
std::string MungeSocketForSlurm(const EnvMap& env);

// `unmunge --numeric --keys=UID` output ("UID: 1000", a blank line, the payload) -> MungeDecoded.
StatusOr<MungeDecoded> ParseUnmungeOutput(const std::string& text);

}  // namespace dadtrun
}  // namespace dadt
