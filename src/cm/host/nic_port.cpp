#include "cm/host/nic_port.hpp"

#include "common/log.hpp"
#include "net/listener_table.hpp"
#include "net/port_group.hpp"
#include "net/registry.hpp"
#include "transport/nic.hpp"

namespace uroce::cm {

// ------------------------------------------------------------------ NicGsiPort

NicGsiPort::NicGsiPort(transport::Nic& nic, const IpAddr& addr, uint32_t mtu, uint64_t node_guid, uint8_t ack_delay)
    : nic_(&nic), addr_(addr), mtu_(mtu), guid_(node_guid), ack_delay_(ack_delay) {}

NicGsiPort::~NicGsiPort() { nic_->set_gsi_handler(nullptr); }

Endpoint NicGsiPort::local() const noexcept { return nic_->local(); }

void NicGsiPort::set_receiver(GsiReceiver* r) noexcept {
  if (!r) {
    nic_->set_gsi_handler(nullptr);
    return;
  }
  nic_->set_gsi_handler([this, r](const transport::Nic::GsiPacket& p) {
    GsiMad m;
    m.data = p.payload;
    m.src = p.src;
    m.dst = p.dst;
    m.src_qp = p.src_qp;
    m.pkey = p.pkey;
    r->on_mad(*this, m);
  });
}

void NicGsiPort::send(const Endpoint& dst, std::span<const uint8_t> mad) noexcept { nic_->send_gsi(dst, mad); }

// ------------------------------------------------------------------ RegistryDirectory

std::unique_ptr<RegistryDirectory> RegistryDirectory::create() {
  std::unique_ptr<RegistryDirectory> d(new RegistryDirectory());
  auto reg = net::HostRegistry::instance();
  if (reg.ok())
    d->reg_ = *reg;
  else
    UROCE_LOG(warn, "cm: host registry unavailable (%s): same-host peers are reached at 4791 only",
              reg.status().to_string().c_str());
  return d;
}

RegistryDirectory::~RegistryDirectory() = default;

net::ListenerTable* RegistryDirectory::table() const noexcept {
  std::lock_guard g(mu_);
  if (!table_ && !table_failed_ && reg_) {
    auto t = net::ListenerTable::open(reg_);
    if (t.ok()) {
      table_ = std::move(*t);
    } else {
      table_failed_ = true;
      UROCE_LOG(warn, "cm: %s: listeners of other processes on this host cannot be found",
                t.status().to_string().c_str());
    }
  }
  return table_.get();
}

uint32_t RegistryDirectory::slot() const noexcept { return reg_ ? reg_->slot() : 0; }

std::optional<uint16_t> RegistryDirectory::port_of(uint32_t slot, const IpAddr& addr) const noexcept {
  if (!reg_) return std::nullopt;
  return reg_->lookup_port(slot, addr);
}

// A connection request from anywhere reaches the listener's process on a
// shared port once the port's steering knows the listener.
Status RegistryDirectory::add_listener(const IpAddr& addr, uint64_t sid) noexcept {
  net::ListenerTable* t = table();
  if (!t) return {};
  UROCE_TRY(t->add(addr, sid));
  net::PortGroup::steer_all();
  return {};
}

void RegistryDirectory::remove_listener(const IpAddr& addr, uint64_t sid) noexcept {
  if (net::ListenerTable* t = table()) {
    t->remove(addr, sid);
    net::PortGroup::steer_all();
  }
}

std::optional<uint32_t> RegistryDirectory::find_listener(const IpAddr& addr, uint64_t sid) const noexcept {
  net::ListenerTable* t = table();
  return t ? t->find(addr, sid) : std::nullopt;
}

}  // namespace uroce::cm
