// `uroce exec`'s view of the devices for programs that look for them in the
// file system rather than through libibverbs: UCX uses a device only if
// /dev/infiniband/<dev_name> is an accessible character device, rdma-core's
// tests and others read /sys/class/infiniband/<dev>/ (the netdev under
// device/net/, the GID types under ports/1/gid_attrs/).  uroce has no kernel
// device, so exec gives the program a mount namespace of its own where
//
//   /dev/infiniband/<dev_name>   is /dev/null bind-mounted (a character
//                                device anyone may open; nothing reads it)
//   /sys/class/infiniband/<dev>/ is a small tmpfs tree describing the device
//
// and everything else in /dev and /sys/class is the host's, bind-mounted
// back.  The host's /dev and /sys are never written.  As root the namespace
// is a mount namespace; as another user it is a user namespace mapping the
// user to itself, with a mount namespace (Linux allows that to unprivileged
// users unless the administrator forbids it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "uroce/ip_addr.hpp"

namespace uroce::cli {

struct ViewDevice {
  std::string name;      // ibv_get_device_name: uroce0, ...
  std::string dev_name;  // ibv_device::dev_name (the /dev/infiniband entry)
  std::vector<IpAddr> gids;
};

// The devices of the environment (UROCE_ADDR, as libibverbs sees them).
std::vector<ViewDevice> view_devices();

// True if every device already has its /dev/infiniband entry (accessible
// character device) and its /sys/class/infiniband directory.
bool view_present(const std::vector<ViewDevice>& devs);

// Makes the view for this process and the programs it runs.  Must be called
// while the process has a single thread.  Returns "" on success, else why
// not and what the user can do about it.
std::string install_view(const std::vector<ViewDevice>& devs);

// The sysfs text of a GID: eight groups of four hex digits.
std::string sysfs_gid(const IpAddr& a);

}  // namespace uroce::cli
