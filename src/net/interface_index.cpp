#include "net/interface_index.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace uroce::net {

uint32_t interface_index(const IpAddr& addr) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return 0;
  uint32_t index = 0;
  for (ifaddrs* i = ifs; i && !index; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    auto ep = Endpoint::from_sockaddr(i->ifa_addr, len);
    if (!ep) continue;
    bool match = ep->addr == addr;
    if (!match && (i->ifa_flags & IFF_LOOPBACK) && i->ifa_netmask && addr.is_v4() && ep->addr.is_v4()) {
      auto mask = Endpoint::from_sockaddr(i->ifa_netmask, len);
      match = mask && (addr.v4() & mask->addr.v4()) == (ep->addr.v4() & mask->addr.v4());
    }
    if (match) index = if_nametoindex(i->ifa_name);
  }
  freeifaddrs(ifs);
  return index;
}

}  // namespace uroce::net
