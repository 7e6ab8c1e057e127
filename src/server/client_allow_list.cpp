// The client address filter of `pagoda serve`; see client_allow_list.h.
#include "server/client_allow_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace pagoda::server {
namespace {

namespace ip = boost::asio::ip;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

ClientAllowList ClientAllowList::parse(const std::vector<std::string>& entries) {
  ClientAllowList list;
  for (const std::string& given : entries) {
    std::string_view rest = given;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view entry = trim(rest.substr(0, comma));
      if (!entry.empty()) list.add(entry);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return list;
}

void ClientAllowList::add(std::string_view entry) {
  const std::string text(entry);
  boost::system::error_code ec;
  if (text.find('/') == std::string::npos) {
    // A single address: a network of one.
    const ip::address address = ip::make_address(text, ec);
    if (ec) fail("--allowed-clients: '{}' is not an IP address or CIDR network", text);
    if (address.is_v4()) {
      v4_.emplace_back(address.to_v4(), 32);
    } else {
      v6_.emplace_back(ip::address_v6(address.to_v6().to_bytes()), 128);  // no zone
    }
    return;
  }
  const bool v6 = text.find(':') != std::string::npos;
  if (v6) {
    const ip::network_v6 network = ip::make_network_v6(text, ec);
    if (ec) fail("--allowed-clients: '{}' is not an IPv6 CIDR network ({})", text, ec.message());
    if (network != network.canonical())
      fail("--allowed-clients: '{}' has host bits set; the network is {}", text,
           network.canonical().to_string());
    v6_.push_back(network);
  } else {
    const ip::network_v4 network = ip::make_network_v4(text, ec);
    if (ec) fail("--allowed-clients: '{}' is not an IPv4 CIDR network ({})", text, ec.message());
    if (network != network.canonical())
      fail("--allowed-clients: '{}' has host bits set; the network is {}", text,
           network.canonical().to_string());
    v4_.push_back(network);
  }
}

bool ClientAllowList::allows(const ip::address& client) const {
  if (allows_everyone()) return true;
  ip::address address = client;
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    address = ip::make_address_v4(ip::v4_mapped, address.to_v6());
  if (address.is_v4()) {
    const ip::network_v4 host(address.to_v4(), 32);
    for (const auto& network : v4_) {
      if (host == network || host.is_subnet_of(network)) return true;
    }
    return false;
  }
  // Without its zone (fe80::1%eth0): networks are matched on the address bits alone.
  const ip::network_v6 host(ip::address_v6(address.to_v6().to_bytes()), 128);
  for (const auto& network : v6_) {
    if (host == network || host.is_subnet_of(network)) return true;
  }
  return false;
}

std::string ClientAllowList::describe() const {
  std::vector<std::string> parts;
  for (const auto& n : v4_) parts.push_back(n.to_string());
  for (const auto& n : v6_) parts.push_back(n.to_string());
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace pagoda::server
