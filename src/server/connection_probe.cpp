// Finding a handler's socket by its two ends, and asking it whether the peer hung up; see
// connection_probe.h.
#include "server/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace pagoda::server {
namespace {

// The numeric host and the port of one end, formatted as httplib formats them.
bool endpoint(int fd, bool peer, std::string* host, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return false;
  char name[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, name, sizeof(name), service,
                    sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = name;
  *port = std::atoi(service);
  return true;
}

bool matches(int fd, const std::string& remote_addr, int remote_port, const std::string& local_addr,
             int local_port) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  std::string host;
  int port = -1;
  if (!endpoint(fd, true, &host, &port) || port != remote_port || host != remote_addr) {
    return false;
  }
  // The peer's end alone already singles out the accepted socket (the client's own socket, if
  // in this process, has it as its local end); the local end is checked when httplib gave it.
  if (local_port <= 0 && local_addr.empty()) return true;
  if (!endpoint(fd, false, &host, &port)) return false;
  return (local_port <= 0 || port == local_port) && (local_addr.empty() || host == local_addr);
}

}  // namespace

ConnectionProbe ConnectionProbe::find(const std::string& remote_addr, int remote_port,
                                      const std::string& local_addr, int local_port) {
  if (remote_port <= 0 || remote_addr.empty()) return {};
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return {};
  const int own_fd = ::dirfd(dir);
  int found = -1;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own_fd) continue;
    if (matches(static_cast<int>(fd), remote_addr, remote_port, local_addr, local_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return ConnectionProbe(found);
}

bool ConnectionProbe::closed() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLIN | POLLRDHUP;
  if (::poll(&p, 1, 0) <= 0) return false;
  // Like uvicorn's http.disconnect: the peer's end-of-stream counts as gone, even if it only
  // shut down its sending side (OpenAI clients never do while awaiting the response).
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) != 0) return true;
  if ((p.revents & POLLIN) != 0) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

}  // namespace pagoda::server
