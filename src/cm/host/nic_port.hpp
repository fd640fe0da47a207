// The CM's view of a uroce device: QP1 of its NIC (GsiPort) and the host
// registry (Directory).  Compiled into whatever holds the core -- the
// drop-in libibverbs.so.1, which lends them to librdmacm.so.1
// (src/compat/cm_host.hpp), and the tests.
#pragma once

#include <memory>
#include <mutex>

#include "cm/gsi.hpp"

namespace uroce::transport {
class Nic;
}
namespace uroce::net {
class HostRegistry;
class ListenerTable;
}  // namespace uroce::net

namespace uroce::cm {

class NicGsiPort final : public GsiPort {
 public:
  // `nic` must outlive the port (keep a context of its device open).
  NicGsiPort(transport::Nic& nic, const IpAddr& addr, uint32_t mtu, uint64_t node_guid, uint8_t ack_delay);
  ~NicGsiPort() override;  // stops receiving

  IpAddr address() const noexcept override { return addr_; }
  Endpoint local() const noexcept override;
  uint32_t mtu() const noexcept override { return mtu_; }
  uint64_t node_guid() const noexcept override { return guid_; }
  uint8_t ack_delay() const noexcept override { return ack_delay_; }
  void set_receiver(GsiReceiver* r) noexcept override;
  void send(const Endpoint& dst, std::span<const uint8_t> mad) noexcept override;

 private:
  transport::Nic* nic_;
  IpAddr addr_;
  uint32_t mtu_;
  uint64_t guid_;
  uint8_t ack_delay_;
};

// The Directory over the process's host registry and its listener table.
class RegistryDirectory final : public Directory {
 public:
  // The registry of this process (HostRegistry::instance()); without one
  // (it could not be opened) every lookup answers "nobody".
  static std::unique_ptr<RegistryDirectory> create();
  ~RegistryDirectory() override;

  uint32_t slot() const noexcept override;
  std::optional<uint16_t> port_of(uint32_t slot, const IpAddr& addr) const noexcept override;
  Status add_listener(const IpAddr& addr, uint64_t service_id) noexcept override;
  void remove_listener(const IpAddr& addr, uint64_t service_id) noexcept override;
  std::optional<uint32_t> find_listener(const IpAddr& addr, uint64_t service_id) const noexcept override;

 private:
  RegistryDirectory() = default;
  net::ListenerTable* table() const noexcept;  // opened on first use

  std::shared_ptr<net::HostRegistry> reg_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<net::ListenerTable> table_;
  mutable bool table_failed_ = false;
};

}  // namespace uroce::cm
