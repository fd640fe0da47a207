// Where a peer's packets go: the UDP endpoint of (GID, QP number).
//
// RoCEv2 sends to UDP port 4791.  A same-host uroce process that could not
// get that port publishes the one it has in the host registry, under the
// slot its QP numbers carry (qp_table.hpp); any other peer is at 4791.
// Answers are cached (the registry lookup costs system calls): a found port
// for a second, a miss for less, so that a peer that publishes its port a
// moment late is found soon.  A connecting QP, and one whose peer stopped
// answering, asks afresh (`fresh`): the peer's process may have claimed a
// slot another process freed within the second, on another port.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "common/ip_addr.hpp"
#include "transport/work_queue.hpp"

namespace uroce::net {
class HostRegistry;
}

namespace uroce::transport {

class PeerPorts {
 public:
  static constexpr std::chrono::milliseconds kHitTtl{1000};
  static constexpr std::chrono::milliseconds kMissTtl{100};

  explicit PeerPorts(std::shared_ptr<net::HostRegistry> registry) : registry_(std::move(registry)) {}

  Endpoint resolve(const IpAddr& gid, uint32_t qpn, bool fresh = false);

 private:
  struct Answer {
    uint16_t port;
    Clock::time_point expires;
  };
  std::shared_ptr<net::HostRegistry> registry_;
  std::map<std::pair<uint32_t, IpAddr>, Answer> cache_;  // by (slot, gid)
};

}  // namespace uroce::transport
