#include "runtime/common/thread_priority.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <string>

namespace dadt {

Status MakeThisThreadRealtime() {
  sched_param param{};
  param.sched_priority = 1;
  const int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  if (err == 0) return Status::OK();
  return PreconditionFailed(std::string("cannot make a communication thread real-time "
                                        "(SCHED_FIFO 1): ") + std::strerror(err) +
                            " (needs CAP_SYS_NICE or `ulimit -r` >= 1)");
}

}  // namespace dadt
