// An opened device.  Contexts on the same device share one NIC (socket,
// engine lock, progress thread); each context has its own async event queue.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "uroce/congestion.hpp"
#include "uroce/faults.hpp"
#include "verbs/event_count.hpp"
#include "verbs/resources.hpp"
#include "verbs/types.hpp"

namespace uroce::transport {
class Nic;
struct NicConfig;
}  // namespace uroce::transport

namespace uroce::verbs {

// What a device is: its name and the address(es) it serves.
struct DeviceConfig {
  std::string name = "uroce0";
  std::vector<IpAddr> gids;  // GID table; gids[0] is the address the NIC binds
  uint16_t udp_port = 4791;
  uint32_t mtu = 0;  // 0: derive from the interface MTU
  // Fault injection on the device's packets (include/uroce/faults.hpp).
  // Unset: UROCE_FAULTS decides; set (even to no faults): this does.
  std::optional<FaultConfig> faults;
  // Congestion control (transport/congestion.hpp).  Unset: UROCE_CC decides.
  std::optional<CongestionConfig> congestion;
  // Same-host peers through shared-memory rings (net/shm_io.hpp).  Unset:
  // UROCE_SHM decides (on unless 0).  Ignored with io_factory.
  std::optional<bool> shm;
  // One-copy WRITEs and READs with same-host peers (transport::NicConfig::
  // shm_copy; unset: UROCE_SHM_COPY, else on where safe).
  std::optional<bool> shm_copy;
  // Tests: packet I/O to use instead of a UDP socket (e.g. a FakeIo).  A
  // device with its own I/O gets a NIC of its own (not shared by address).
  std::function<Result<std::unique_ptr<net::PacketIo>>()> io_factory;
};

// Devices from the environment: UROCE_ADDR (comma-separated addresses, one
// device each; default 127.0.0.1) and UROCE_PORT (default 4791).
Result<std::vector<DeviceConfig>> devices_from_env();

// The device's node GUID (what Context::device_attr().node_guid reports),
// known without opening the device (ibv_get_device_guid needs it).
uint64_t node_guid(const DeviceConfig& cfg) noexcept;

struct AsyncEvent {
  AsyncEventType type;
  void* element = nullptr;  // the Qp*, Cq*, Srq* concerned (core object), or nullptr
  uint32_t port_num = 1;
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> open(const DeviceConfig& cfg);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceConfig& config() const noexcept { return cfg_; }
  const DeviceAttr& device_attr() const noexcept { return dev_attr_; }
  const PortAttr& port_attr() const noexcept { return port_attr_; }
  transport::Nic& nic() const noexcept { return *nic_; }
  // The device's object limits and counts, shared with the other contexts
  // of the device (resources.hpp).
  DeviceResources& resources() const noexcept { return *resources_; }
  // PDs, CQs and completion channels of this context not yet destroyed:
  // closing the device while some remain is the application's error.
  std::atomic<int>& users() noexcept { return users_; }

  // Async events: a pollable fd and a queue.
  int async_fd() const noexcept { return async_count_.fd(); }
  // Takes the oldest event; blocks unless async_fd() is O_NONBLOCK (EAGAIN
  // then, when none is queued).  timeout_ms >= 0 waits at most that long
  // for one (ETIMEDOUT), even if other threads take the events that come.
  // `delivered` runs on it under the queue's lock, so that a consumer can
  // count the event against its object before a concurrent destroy's
  // forget_async_events() returns: the object is alive while it runs.
  Result<AsyncEvent> get_async_event(const std::function<void(const AsyncEvent&)>& delivered = {}, int timeout_ms = -1);
  void post_async_event(const AsyncEvent& ev) noexcept;
  // Drops queued events about an object being destroyed.  Once it returns,
  // no event about `element` is being handed out.
  void forget_async_events(const void* element) noexcept;

 private:
  Context(DeviceConfig cfg, std::shared_ptr<transport::Nic> nic, EventCount async_count);
  DeviceConfig cfg_;
  DeviceAttr dev_attr_;
  PortAttr port_attr_;
  std::shared_ptr<transport::Nic> nic_;
  std::shared_ptr<DeviceResources> resources_;
  std::atomic<int> users_{0};
  EventCount async_count_;  // read and written only under async_mu_
  std::mutex async_mu_;
  std::deque<AsyncEvent> async_;
};

}  // namespace uroce::verbs
