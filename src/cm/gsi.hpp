// What the connection manager needs from below: a port to send and receive
// MADs on (QP1 of a device), and the host-wide directory through which it
// finds the process of a same-host peer.
//
// Both are interfaces so that the CM core (src/cm) depends on no verbs or
// transport code: over a uroce NIC they are implemented by src/cm/host
// (NicGsiPort, RegistryDirectory), which the drop-in libibverbs.so.1 carries
// and hands to librdmacm.so.1 (src/compat/cm_host.hpp); tests use in-memory
// fakes or the NIC over FakeIo.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "common/ip_addr.hpp"
#include "common/status.hpp"

namespace uroce::cm {

class GsiPort;

// One MAD received on QP1.
struct GsiMad {
  std::span<const uint8_t> data;  // the MAD (256 bytes for CM), valid during the call
  Endpoint src;                   // sender's IP address and UDP source port
  IpAddr dst;                     // the local address it was sent to
  uint32_t src_qp = 0;            // DETH source QP (1 for a CM)
  uint16_t pkey = 0xffff;
};

class GsiReceiver {
 public:
  virtual ~GsiReceiver() = default;
  // Called in whatever thread drives the device (under its engine lock):
  // copy what is needed and return; never call back into the port.
  virtual void on_mad(GsiPort& port, const GsiMad& mad) noexcept = 0;
};

// QP1 of one device.
class GsiPort {
 public:
  virtual ~GsiPort() = default;
  virtual IpAddr address() const noexcept = 0;  // GID 0: the device's IP address
  virtual Endpoint local() const noexcept = 0;  // the UDP endpoint it receives on
  virtual uint32_t mtu() const noexcept = 0;    // active MTU in bytes
  virtual uint64_t node_guid() const noexcept = 0;
  virtual uint8_t ack_delay() const noexcept = 0;  // local CA ACK delay (IBA time exponent)
  // Receives the MADs to QP1 from now on (nullptr: stop).  Takes effect
  // before it returns.
  virtual void set_receiver(GsiReceiver* r) noexcept = 0;
  // Sends one MAD as a UD SEND_ONLY from QP1 to QP1 at `dst`.
  virtual void send(const Endpoint& dst, std::span<const uint8_t> mad) noexcept = 0;
};

// The host registry, as the CM sees it.
class Directory {
 public:
  virtual ~Directory() = default;
  // This process's registry slot (QPNs are slot << 14 | index); 0 if none.
  virtual uint32_t slot() const noexcept = 0;
  // The UDP port on which the process holding `slot` receives for `addr` in
  // our network namespace, if any.
  virtual std::optional<uint16_t> port_of(uint32_t slot, const IpAddr& addr) const noexcept = 0;
  // Announces that this process listens for `service_id` on `addr` (an
  // unspecified address: all addresses of its family).  EADDRINUSE if a live
  // process of our namespace already listens on an overlapping address.
  virtual Status add_listener(const IpAddr& addr, uint64_t service_id) noexcept = 0;
  virtual void remove_listener(const IpAddr& addr, uint64_t service_id) noexcept = 0;
  // The slot of a live process listening for `service_id` on `addr` (or on
  // the unspecified address), if any.
  virtual std::optional<uint32_t> find_listener(const IpAddr& addr, uint64_t service_id) const noexcept = 0;
};

}  // namespace uroce::cm
