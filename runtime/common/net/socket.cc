#include "runtime/common/net/socket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dadt {
namespace net {
namespace {

// Milliseconds left until `deadline`, clamped to [0, INT_MAX-ish] for poll().
int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left);
}

Status WaitFor(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, MillisLeft(deadline));
    if (r > 0) return Status::OK();
    if (r == 0) return TimeoutError(std::string("timed out while ") + what);
    if (errno != EINTR) return InternalError(std::string("poll: ") + ErrnoText(errno));
  }
}

StatusOr<addrinfo*> Resolve(const std::string& addr, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return InvalidArgument("cannot resolve '" + addr + "': " + ::gai_strerror(rc));
  }
  return res;
}

}  // namespace

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  return std::string(::strerror_r(err, buf, sizeof(buf)));
}

StatusOr<int> ConnectTcp(const std::string& addr, int port) {
  StatusOr<addrinfo*> res = Resolve(addr, port, false);
  if (!res.ok()) return res.status();
  std::string last_error = "no address";
  for (addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    int rc;
    do {
      rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(*res);
      return fd;
    }
    last_error = ErrnoText(errno);
    ::close(fd);
  }
  ::freeaddrinfo(*res);
  return Aborted(last_error);
}

StatusOr<std::string> InterfaceAddress(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Aborted("getifaddrs: " + ErrnoText(errno));
  std::string found;
  bool exists = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (iface != a->ifa_name) continue;
    exists = true;
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      found = buf;
      break;
    }
  }
  freeifaddrs(list);
  if (!exists) return InvalidArgument("network interface '" + iface + "' does not exist on this host");
  if (found.empty()) return InvalidArgument("network interface '" + iface + "' has no IPv4 address");
  return found;
}

StatusOr<std::string> RouteSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) {
    return InvalidArgument("cannot resolve host '" + host + "' to an IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Aborted("socket: " + ErrnoText(errno));
  }
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);  // UDP: only picks the route
  freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (rc != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    const int e = errno;
    ::close(fd);
    return InvalidArgument("no route to host '" + host + "': " + ErrnoText(e));
  }
  ::close(fd);
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

StatusOr<int> ListenTcp(const std::string& addr, int port, int* bound_port) {
  StatusOr<addrinfo*> res = Resolve(addr, port, true);
  if (!res.ok()) return res.status();
  std::string last_error = "no address";
  for (addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_error = ErrnoText(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    ::freeaddrinfo(*res);
    return fd;
  }
  ::freeaddrinfo(*res);
  return Aborted("cannot listen on " + addr + ":" + std::to_string(port) + ": " + last_error);
}

Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return InternalError("fcntl(O_NONBLOCK): " + ErrnoText(errno));
  }
  return Status::OK();
}

Status SendAll(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    DADT_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "sending to the rendezvous server"));
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Aborted("send: " + ErrnoText(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status RecvAll(int fd, char* data, size_t n, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    DADT_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "waiting for the rendezvous server"));
    ssize_t r = ::recv(fd, data + done, n - done, MSG_DONTWAIT);
    if (r == 0) return Aborted("the rendezvous server closed the connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Aborted("recv: " + ErrnoText(errno));
    }
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace net
}  // namespace dadt
