// ListenerTable: which process of this host listens for which rdma_cm
// service, so that a connection request reaches it although several uroce
// processes share an IP address and only the first owns UDP port 4791.
//
// A file next to the host registry (<registry path>.cm, same trust rules:
// owned by this user, mode 0600, no symlinks), mapped MAP_SHARED: a header
// and 4096 entries (netns, IP address, service ID) -> registry slot.  An
// entry belongs to the process whose registry owner word it carries; it
// counts only while that process still holds the slot (HostRegistry::holds),
// so the entries of a dead process are ignored and reclaimed.  A process
// writes only entries it has claimed (compare-and-swap of the owner word),
// under a per-entry sequence lock that readers retry on.
//
// The listener's UDP port is not stored: it is the port its slot publishes
// for the address in the registry (HostRegistry::lookup_port).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"

namespace uroce::net {

class HostRegistry;

namespace listeners {
struct File;
}

class ListenerTable {
 public:
  static constexpr uint32_t kEntries = 4096;

  // The table of `reg` (at reg->path() + ".cm"), created if needed.
  static Result<std::unique_ptr<ListenerTable>> open(std::shared_ptr<HostRegistry> reg);
  ~ListenerTable();
  ListenerTable(const ListenerTable&) = delete;
  ListenerTable& operator=(const ListenerTable&) = delete;

  // Records that we listen for `service_id` on `addr` (an unspecified
  // address: every address of its family; :: takes IPv4 too) in our network
  // namespace.  EADDRINUSE if another live process listens on an overlapping
  // address; ENOSPC if the table is full.
  Status add(const IpAddr& addr, uint64_t service_id);
  void remove(const IpAddr& addr, uint64_t service_id) noexcept;
  // The slot of a live process of our namespace listening for `service_id`
  // on `addr`, an exact address before an unspecified one.
  std::optional<uint32_t> find(const IpAddr& addr, uint64_t service_id) const;
  // Every (service ID, slot) of a live process of our namespace listening on
  // `addr` (exactly, or through an unspecified address that covers it).
  std::vector<std::pair<uint64_t, uint32_t>> on(const IpAddr& addr) const;

  const std::string& path() const noexcept { return path_; }

 private:
  ListenerTable() = default;

  std::shared_ptr<HostRegistry> reg_;
  std::string path_;
  listeners::File* file_ = nullptr;
  uint64_t netns_ = 0;
  std::mutex mu_;  // our own writes
};

}  // namespace uroce::net
