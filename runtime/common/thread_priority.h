// Real-time scheduling for the threads that move a collective's bytes.
//
// A collective over TCP is a chain of short wake-ups: the transport thread reads a segment, the
// collective's thread sends the next one, the peers do the same. While the training threads keep
// every core busy (backward running beside the reduce-scatters of mode="dear", say), the kernel's
// fair scheduler lets each woken thread wait for the running one's time slice, a few ms per
// wake-up, and the link idles meanwhile: on a 1 Gbit/s link a 4 MB reduce-scatter took 19-35 ms
// beside a busy core instead of 18 ms. Nice values do not help (they change the share of CPU, not
// the wait for it). SCHED_FIFO at the lowest real-time priority does: a woken thread runs at once.
// The price: a real-time thread that polls instead of blocking keeps its core. Gloo's transport
// thread does so at times, and with three ranks on two cores a test suite then ran 17 times
// slower, so the runtime uses this only when asked (DADT_REALTIME_THREADS=1), for one busy rank
// per core at most. The kernel still keeps 5% of each core for normal threads
// (sched_rt_runtime_us).
//
// Needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1 (`ulimit -r`); without either the thread
// stays as it was.
#pragma once

#include "runtime/common/status.h"

namespace dadt {

// Moves the calling thread to SCHED_FIFO priority 1; threads it creates afterwards inherit that.
// kPreconditionFailed, naming the cause, where that is not allowed.
Status MakeThisThreadRealtime();

}  // namespace dadt
