// --allowed-clients' matcher. The expected answers are worked out by hand from the CIDR rule
// (RFC 4632 §3.1: an address is in a.b.c.d/n when its first n bits equal the network's) and the
// IPv4-mapped IPv6 form (RFC 4291 §2.5.5.2), not from the code under test.
#include "server/client_allow_list.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace pagoda::server {
namespace {

bool allows(const ClientAllowList& list, const char* address) {
  return list.allows(boost::asio::ip::make_address(address));
}

TEST(ClientAllowList, EmptyAllowsEveryone) {
  const ClientAllowList list = ClientAllowList::parse({});
  EXPECT_TRUE(list.allows_everyone());
  EXPECT_TRUE(allows(list, "203.0.113.9"));
  EXPECT_TRUE(allows(list, "2001:db8::1"));
  EXPECT_TRUE(ClientAllowList::parse({"", " , "}).allows_everyone());
}

TEST(ClientAllowList, Ipv4NetworksAndAddresses) {
  const ClientAllowList list = ClientAllowList::parse({"10.0.0.0/8, 192.168.4.0/22", "127.0.0.1"});
  EXPECT_FALSE(list.allows_everyone());
  EXPECT_TRUE(allows(list, "10.0.0.0"));
  EXPECT_TRUE(allows(list, "10.255.255.255"));
  EXPECT_FALSE(allows(list, "11.0.0.0"));
  EXPECT_FALSE(allows(list, "9.255.255.255"));
  // /22: 192.168.4.0 to 192.168.7.255.
  EXPECT_TRUE(allows(list, "192.168.4.1"));
  EXPECT_TRUE(allows(list, "192.168.7.255"));
  EXPECT_FALSE(allows(list, "192.168.8.0"));
  EXPECT_FALSE(allows(list, "192.168.3.255"));
  EXPECT_TRUE(allows(list, "127.0.0.1"));
  EXPECT_FALSE(allows(list, "127.0.0.2"));
  // An IPv4 list says nothing about IPv6 clients other than IPv4 ones seen through an IPv6
  // socket (::ffff:a.b.c.d), which are matched as the IPv4 address.
  EXPECT_TRUE(allows(list, "::ffff:10.1.2.3"));
  EXPECT_FALSE(allows(list, "::ffff:11.1.2.3"));
  EXPECT_FALSE(allows(list, "::1"));
  EXPECT_FALSE(allows(list, "::a01:203"));  // 10.1.2.3's bits, but not IPv4-mapped
}

TEST(ClientAllowList, Ipv6NetworksAndAddresses) {
  const ClientAllowList list = ClientAllowList::parse({"fd00::/8", "::1", "2001:db8:a::/48"});
  EXPECT_TRUE(allows(list, "::1"));
  EXPECT_FALSE(allows(list, "::2"));
  EXPECT_TRUE(allows(list, "fd12:3456::1"));
  EXPECT_TRUE(allows(list, "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
  EXPECT_FALSE(allows(list, "fc00::1"));
  EXPECT_TRUE(allows(list, "2001:db8:a:ffff::1"));
  EXPECT_FALSE(allows(list, "2001:db8:b::1"));
  EXPECT_FALSE(allows(list, "127.0.0.1"));
}

TEST(ClientAllowList, WholeFamilies) {
  const ClientAllowList list = ClientAllowList::parse({"0.0.0.0/0"});
  EXPECT_TRUE(allows(list, "1.2.3.4"));
  EXPECT_TRUE(allows(list, "255.255.255.255"));
  EXPECT_FALSE(allows(list, "2001:db8::1"));
  EXPECT_TRUE(allows(ClientAllowList::parse({"::/0"}), "2001:db8::1"));
}

TEST(ClientAllowList, BadEntriesNameThemselves) {
  for (const char* bad : {"10.0.0.0/33", "10.0.0/8", "localhost", "10.0.0.0/", "::1/129",
                          "10.0.0.1/8", "fd00::1/8", "10.0.0.0/8/1", "1.2.3.4.5"}) {
    try {
      ClientAllowList::parse({std::string("127.0.0.1,") + bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("--allowed-clients"), std::string::npos) << e.what();
    }
  }
}

TEST(ClientAllowList, DescribesItsNetworks) {
  EXPECT_EQ(ClientAllowList::parse({"10.0.0.0/8,::1", "192.168.1.7"}).describe(),
            "10.0.0.0/8, 192.168.1.7/32, ::1/128");
}

}  // namespace
}  // namespace pagoda::server
