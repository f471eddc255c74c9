#include "dadtrun/child_signals.h"

#include <signal.h>

#include <initializer_list>

namespace dadt {
namespace dadtrun {

void ResetChildSignals(posix_spawnattr_t* attr, short extra_flags) {
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setsigdefault(attr, &defaults);
  posix_spawnattr_setflags(attr, static_cast<short>(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                    extra_flags));
}

}  // namespace dadtrun
}  // namespace dadt
