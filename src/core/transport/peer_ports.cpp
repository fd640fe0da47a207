#include "transport/peer_ports.hpp"

#include "net/registry.hpp"
#include "net/udp_io.hpp"
#include "transport/qp_table.hpp"

namespace uroce::transport {

Endpoint PeerPorts::resolve(const IpAddr& gid, uint32_t qpn, bool fresh, uint64_t* flags) {
  if (flags) *flags = 0;
  if (!registry_) return {gid, net::kRoceV2Port};
  const uint32_t slot = QpTable::slot_of(qpn);
  const Clock::time_point now = Clock::now();
  const auto key = std::make_pair(slot, gid);
  if (auto it = cache_.find(key); !fresh && it != cache_.end() && it->second.expires > now) {
    if (flags) *flags = it->second.flags;
    return {gid, it->second.port};
  }
  const std::optional<net::HostRegistry::Published> found = registry_->lookup(slot, gid);
  if (cache_.size() > 4096) cache_.clear();
  const uint16_t port = found ? found->port : net::kRoceV2Port;
  const uint64_t f = found ? found->flags : 0;
  cache_[key] = {port, f, now + (found ? Clock::duration(kHitTtl) : Clock::duration(kMissTtl))};
  if (flags) *flags = f;
  return {gid, port};
}

}  // namespace uroce::transport
