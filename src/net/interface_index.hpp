// The network interface an address of ours is on.
#pragma once

#include <cstdint>

#include "common/ip_addr.hpp"

namespace uroce::net {

// Index of the interface holding `addr` (the loopback interface for any
// address of its subnet), 0 if none.
uint32_t interface_index(const IpAddr& addr);

}  // namespace uroce::net
