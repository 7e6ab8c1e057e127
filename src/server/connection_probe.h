// Noticing that the client of a request being handled went away, for handlers that wait without
// writing (a non-streamed completion). Debian's cpp-httplib (0.11) gives a handler neither its
// socket nor is_connection_closed(); the request does carry the addresses of both ends, and an
// open TCP connection is the one socket of the process with that pair of ends. The socket stays
// open while its handler runs (httplib closes it only afterwards), so the probe stays valid.
#pragma once

#include <string>

namespace pagoda::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  // The socket connected from remote_addr:remote_port to local_addr:local_port (addresses as
  // httplib writes them: numeric, from getnameinfo; an empty local end is not checked), or an
  // inactive probe if none is found.
  static ConnectionProbe find(const std::string& remote_addr, int remote_port,
                              const std::string& local_addr, int local_port);

  bool active() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // True once the client closed its end or the connection broke: a read would see end-of-file
  // or an error. Never true for an inactive probe. Does not consume anything from the socket.
  bool closed() const;

 private:
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace pagoda::server
