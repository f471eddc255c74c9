// Small POSIX socket helpers (dadt::net) shared by the rendezvous client, dadtrun and core.
//
// Everything returns Status with the errno text; nothing here raises SIGPIPE (sends use
// MSG_NOSIGNAL) and every socket is created close-on-exec so ranks never inherit them.
//
//   StatusOr<int> fd = ConnectTcp("127.0.0.1", 29500);
//   DADT_RETURN_IF_ERROR(SendAll(*fd, frame, deadline));
#pragma once

#include <chrono>
#include <string>

#include "runtime/common/status.h"

namespace dadt {
namespace net {

using Clock = std::chrono::steady_clock;

// "strerror(errno)" for the current errno (thread-safe).
std::string ErrnoText(int err);

// One connection attempt (no retry). The socket is blocking, close-on-exec, with TCP_NODELAY.
StatusOr<int> ConnectTcp(const std::string& addr, int port);

// Listens on addr:port (port 0 = ephemeral), close-on-exec, non-blocking. `*bound_port` gets the port.
StatusOr<int> ListenTcp(const std::string& addr, int port, int* bound_port);

Status SetNonBlocking(int fd);

// The first IPv4 address of network interface `iface` (e.g. "eth0"); InvalidArgument naming the
// interface when it does not exist or has no IPv4 address.
StatusOr<std::string> InterfaceAddress(const std::string& iface);

// The local IPv4 address this host would use to reach `host` (resolved, routed; nothing is sent).
StatusOr<std::string> RouteSourceAddress(const std::string& host);

// Blocking-socket I/O bounded by `deadline` (poll before each step); EOF is Aborted.
Status SendAll(int fd, const std::string& data, Clock::time_point deadline);
Status RecvAll(int fd, char* data, size_t n, Clock::time_point deadline);

}  // namespace net
}  // namespace dadt
