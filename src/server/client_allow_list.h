// `pagoda serve --allowed-clients`: the networks a client's address must fall in for the server
// to talk to it, the in-server form of the deployment guides' iptables rule on port 8000. The
// transport checks it when it accepts a connection, before reading a byte (http_transport.h).
// Networks are Asio's own types, so "10.0.0.0/8", "192.168.1.7" and "fd00::/8" parse as the
// kernel would read them; an IPv4 client seen through an IPv6 socket (::ffff:10.1.2.3, when
// listening on "::") is matched as the IPv4 address it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>

namespace pagoda::server {

class ClientAllowList {
 public:
  // Allows everyone.
  ClientAllowList() = default;

  // `entries` are CIDR networks or single addresses; each may itself be a comma-separated list
  // ("10.0.0.0/8,::1"), and spaces around entries are ignored. An entry that is neither, or a
  // network with host bits set ("10.0.0.1/8": almost always a typo for a different mask),
  // throws pagoda::Error naming the entry. An empty result allows everyone.
  static ClientAllowList parse(const std::vector<std::string>& entries);

  // True when no list was given (every client is allowed).
  bool allows_everyone() const { return v4_.empty() && v6_.empty(); }
  bool allows(const boost::asio::ip::address& client) const;
  // "10.0.0.0/8, ::1/128": for the start-up log line.
  std::string describe() const;

 private:
  void add(std::string_view entry);

  std::vector<boost::asio::ip::network_v4> v4_;
  std::vector<boost::asio::ip::network_v6> v6_;
};

}  // namespace pagoda::server
