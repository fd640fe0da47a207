// What /proc tells about a process: enough to tell a live process from a
// dead one whose pid was reused, and which namespaces we are in.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/ip_addr.hpp"

namespace uroce::net {

struct ProcStat {
  char state;      // field 3: R, S, D, Z (zombie), X (dead), ...
  uint64_t start;  // field 22: start time, clock ticks after boot
};

// /proc/<pid>/stat; pid 0 means ourselves.  nullopt if the process is gone.
std::optional<ProcStat> proc_stat(pid_t pid) noexcept;

// Inode of one of the calling thread's namespaces ("net", "pid"), from
// /proc/thread-self/ns/<kind> (else /proc/self/ns/<kind>); 0 without /proc.
uint64_t ns_inode(const char* kind) noexcept;

// The uids owning the UDP sockets of our network namespace (/proc/net/udp
// and udp6) that are bound to `port` on `addr`, on the unspecified address,
// or (IPv6 sockets) on the v4-mapped form of `addr`: those that keep us from
// binding it.  Empty if there are none or /proc cannot be read.
std::vector<uid_t> udp_port_holders(const IpAddr& addr, uint16_t port);

}  // namespace uroce::net
