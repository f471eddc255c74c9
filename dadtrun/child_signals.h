// The signal state dadtrun's helper children start with (a discovery script, munge): posix_spawn
// otherwise hands them dadtrun's own mask and dispositions, and dadtrun blocks or catches the
// signals that end a child (SIGPIPE, SIGINT, SIGTERM, SIGHUP) and SIGCHLD.
//
//   posix_spawnattr_t attr;
//   posix_spawnattr_init(&attr);
//   ResetChildSignals(&attr, POSIX_SPAWN_SETPGROUP);  // plus the caller's own flags
#ifndef DADT_DADTRUN_CHILD_SIGNALS_H_
#define DADT_DADTRUN_CHILD_SIGNALS_H_

#include <spawn.h>

namespace dadt {
namespace dadtrun {

// Empties the child's signal mask and sets SIGPIPE, SIGINT, SIGTERM, SIGHUP and SIGCHLD to their
// default actions; `extra_flags` (POSIX_SPAWN_* bits) are set beside the two this needs.
void ResetChildSignals(posix_spawnattr_t* attr, short extra_flags = 0);

}  // namespace dadtrun
}  // namespace dadt

#endif  // DADT_DADTRUN_CHILD_SIGNALS_H_
