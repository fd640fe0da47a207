// Devices and the device context.
//
// A device is an IP address the software NIC serves (its GID table) and a
// UDP port.  uroce::devices() lists the ones the environment names
// (UROCE_ADDR, UROCE_PORT); a DeviceInfo can also be built by hand.
// Opening one gives a Context, the root of every other object.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "uroce/completion.hpp"
#include "uroce/faults.hpp"
#include "uroce/fwd.hpp"
#include "uroce/protection_domain.hpp"

namespace uroce {

// What a device is.
struct DeviceInfo {
  std::string name = "uroce0";
  // GID table; gids[0] is the address the NIC binds.  RoCEv2 GIDs are IP
  // addresses (IPv4 in the v4-mapped form).
  std::vector<IpAddr> gids{};
  // UDP port to receive on.  4791 is RoCEv2's; when another process of this
  // host already has it, the NIC takes an ephemeral port that same-host
  // peers find through the host registry.  0: an ephemeral port at once.
  uint16_t udp_port = 4791;
  // Port MTU in bytes; 0: derived from the interface that holds gids[0].
  uint32_t mtu = 0;
  // Fault injection on the device's packets, to test against a bad network
  // (uroce/faults.hpp).  Unset: the UROCE_FAULTS environment variable
  // decides (devices() leaves it unset); set, even to FaultConfig{} (no
  // faults), it overrides UROCE_FAULTS.  Contexts of one address in a
  // process share a NIC: opening it again with other faults is EBUSY.
  std::optional<FaultConfig> faults{};
  // Same-host peers through shared memory (README: "Shared memory on one
  // host").  Unset: the UROCE_SHM environment variable decides (on unless
  // it is 0).  Set, it overrides UROCE_SHM.  Contexts of one address in a
  // process share a NIC: opening it again with the other setting is EBUSY.
  std::optional<bool> shared_memory{};
};

// The devices of the environment: one per address of UROCE_ADDR
// (comma-separated; default 127.0.0.1), named uroce0, uroce1, ..., on
// UROCE_PORT (default 4791).  EINVAL if either variable is malformed.
Result<std::vector<DeviceInfo>> devices();

// Limits the NIC enforces and port properties (uroce/types.hpp).
using DeviceAttributes = verbs::DeviceAttr;
using PortAttributes = verbs::PortAttr;

// User and kernel CPU time.
struct CpuTime {
  uint64_t user_us = 0;
  uint64_t system_us = 0;
};

// One NIC counter (packets, ACKs, retransmissions, ...).
struct Counter {
  std::string name{};
  uint64_t value = 0;
};

// An asynchronous event (QP error, CQ overflow, SRQ limit, ...).  The
// pointer of the object concerned is set when it still exists: it is the
// API object that owns it now (moving an object updates it).
struct AsyncEvent {
  AsyncEventType type = AsyncEventType::device_fatal;
  QueuePair* qp = nullptr;
  CompletionQueue* cq = nullptr;
  SharedReceiveQueue* srq = nullptr;
  uint32_t qp_num = 0;  // QP events: the QP number
};

class Context {
 public:
  // Opens a device.  EADDRNOTAVAIL if gids[0] is not an address of this
  // host, EINVAL on an empty GID table, or the socket's errno.
  static Result<Context> open(const DeviceInfo& device);
  // Opens the device of that name from uroce::devices(); ENODEV if none.
  static Result<Context> open(std::string_view name = "uroce0");

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  // The device as opened (mtu filled in, and shared_memory: whether its NIC
  // was set to reach same-host peers through shared memory; it keeps UDP
  // where its ring could not be made, with a warning).
  const DeviceInfo& info() const noexcept;
  const std::string& name() const noexcept;
  const DeviceAttributes& device_attr() const noexcept;
  const PortAttributes& port_attr() const noexcept;
  // GID table entry; EINVAL if index is out of range.
  Result<IpAddr> gid(unsigned index = 0) const;
  // The UDP endpoint the NIC receives on (the port may be ephemeral).
  Endpoint local_endpoint() const noexcept;

  Result<ProtectionDomain> alloc_pd();
  Result<CompletionChannel> create_comp_channel();
  // A CQ of at least `cqe` entries; completions raise events on `channel`
  // once armed with req_notify().
  Result<CompletionQueue> create_cq(uint32_t cqe, CompletionChannel* channel = nullptr);

  // A snapshot of the NIC's counters, in a fixed order.  Contexts of the
  // same device in one process share a NIC, hence its counters.
  std::vector<Counter> counters() const;
  // CPU time used by this device's progress thread (the library's own work
  // for the passive side, timers and ACKs), as of its last sleep.
  CpuTime progress_cpu() const noexcept;
  // One counter by name; ENOENT for a name that is not a counter.
  Result<uint64_t> counter(std::string_view name) const;
  // The fault injection in effect on this device (DeviceInfo::faults or
  // UROCE_FAULTS); nullopt when packets pass untouched.
  std::optional<FaultConfig> faults() const;
  // Writes the counters to the shared-memory file `uroce stat` reads now
  // (the NIC does so by itself at most 100 ms after they change); returns
  // the file's path, "" when publishing is off (UROCE_STATS=0).
  std::string publish_counters();

  // The next asynchronous event.  timeout_ms < 0 waits for one; otherwise
  // ETIMEDOUT after that long (also when another thread took the events
  // that came meanwhile).  EAGAIN at once if async_fd() was made
  // O_NONBLOCK and none is queued; EINTR if a signal whose handler lacks
  // SA_RESTART interrupts the wait.  An event about an object destroyed
  // before it was taken is dropped, and never names another object; the
  // object an event names stays valid only as long as the application
  // does not destroy it (there is no acknowledgement to wait for).
  Result<AsyncEvent> get_async_event(int timeout_ms = -1);
  // Polls readable while an async event is queued.
  int async_fd() const noexcept;

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend struct detail::ContextImpl;
  explicit Context(std::unique_ptr<detail::ContextImpl> impl) noexcept;
  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace uroce
