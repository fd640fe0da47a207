#include "transport/peer_ports.hpp"

#include "net/registry.hpp"
#include "net/udp_io.hpp"
#include "transport/qp_table.hpp"

namespace uroce::transport {

Endpoint PeerPorts::resolve(const IpAddr& gid, uint32_t qpn, bool fresh) {
  if (!registry_) return {gid, net::kRoceV2Port};
  const uint32_t slot = QpTable::slot_of(qpn);
  const Clock::time_point now = Clock::now();
  const auto key = std::make_pair(slot, gid);
  if (auto it = cache_.find(key); !fresh && it != cache_.end() && it->second.expires > now)
    return {gid, it->second.port};
  const std::optional<uint16_t> found = registry_->lookup_port(slot, gid);
  if (cache_.size() > 4096) cache_.clear();
  const uint16_t port = found.value_or(net::kRoceV2Port);
  cache_[key] = {port, now + (found ? Clock::duration(kHitTtl) : Clock::duration(kMissTtl))};
  return {gid, port};
}

}  // namespace uroce::transport
