// Cm: addresses and ports -- bind, resolve_addr, resolve_route, listen, and
// where MADs go (the same-host rules of cm.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {
// ------------------------------------------------------------------ bind / resolve

Status Cm::bind(Id* id, const Endpoint& addr) {
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::bind);
  if (!row) return err::inval("rdma_bind_addr: the id is already bound");
  GsiPort* port = nullptr;
  if (!is_any_address(addr.addr)) {
    port = ids_.port_for_address(addr.addr);
    // A loopback address no device holds binds to the first device, as the
    // kernel's rdma_cm does (libfabric's verbs provider binds "localhost"
    // to find a device when given no address).
    if (!port && is_loopback_address(addr.addr)) port = ids_.loopback_bind_port(addr.addr);
    if (!port)
      return err::from_errno(ENODEV, "rdma_bind_addr: no uroce device has the address " + addr.addr.to_string() +
                                         " (UROCE_ADDR lists the devices)");
  }
  uint16_t p = addr.port;
  if (p == 0) {
    p = ids_.ephemeral_port(id->ps_);
    if (p == 0) return err::from_errno(EADDRNOTAVAIL, "rdma_bind_addr: no free port");
  } else if (ids_.port_in_use(id, id->ps_, addr.addr, p)) {
    return err::from_errno(EADDRINUSE, "rdma_bind_addr: " + Endpoint{addr.addr, p}.to_string() + " is in use");
  }
  id->port_ = port;
  id->src_ = {addr.addr, p};
  id->bound_ = true;
  ids_.note_bound(id);
  enter(id, nullptr, *row);
  return {};
}

Status Cm::resolve_addr(Id* id, const std::optional<Endpoint>& src, const Endpoint& dst) {
  if (is_any_address(dst.addr)) return err::inval("rdma_resolve_addr: no destination address");
  if (src && id->state_ == State::idle) UROCE_TRY(bind(id, *src));
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::resolve_addr);
  if (!row) return err::inval(std::string("rdma_resolve_addr: the id is ") + to_string(id->state_));
  if (id->state_ == State::addr_bound && !is_any_address(id->src_.addr) && id->src_.addr.is_v4() != dst.addr.is_v4())
    return err::inval("rdma_resolve_addr: source and destination are of different families");
  GsiPort* port = id->port_;
  // A multicast destination resolves to the device that will join it (the
  // bound one, else as routing picks one): rdma_join_multicast follows.
  if (!port) port = ids_.route_port(dst.addr);
  if (!port) {
    enter(id, nullptr, *row, /*failed=*/true);  // the state stays
    emit_simple(id, EventType::addr_error, -ENODEV);
    return {};
  }
  if (id->state_ == State::idle) {
    const uint16_t p = ids_.ephemeral_port(id->ps_);
    if (p == 0) return err::from_errno(EADDRNOTAVAIL, "rdma_resolve_addr: no free port");
    id->src_.port = p;
    id->bound_ = true;
    ids_.note_bound(id);
  }
  id->port_ = port;
  id->src_.addr = port->address();
  id->dst_ = dst;
  // A loopback destination no device holds means this host, as for the
  // kernel, when the device is on a real interface; devices on loopback
  // addresses (uroce's one-machine setups) are hosts of their own.
  const bool to_self =
      is_loopback_address(dst.addr) && !ids_.port_for_address(dst.addr) && !is_loopback_address(port->address());
  id->dgid_ = to_self ? port->address() : dst.addr;
  enter(id, nullptr, *row);
  emit_simple(id, EventType::addr_resolved);
  return {};
}

Status Cm::resolve_route(Id* id) {
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::resolve_route);
  if (!row)
    return err::inval(std::string("rdma_resolve_route: the address is not resolved (the id is ") +
                      to_string(id->state_) + ")");
  if (!id->port_) {
    enter(id, nullptr, *row, /*failed=*/true);  // the state stays
    emit_simple(id, EventType::route_error, -ENODEV);
    return {};
  }
  id->mtu_ = mtu_enum(id->port_->mtu());
  id->route_ = true;
  enter(id, nullptr, *row);
  emit_simple(id, EventType::route_resolved);
  return {};
}

Status Cm::set_route(Id* id, const IpAddr& sgid, const IpAddr& dgid, uint8_t mtu) {
  OpLock g(*this);
  GsiPort* port = ids_.port_for_address(sgid);
  if (!port) return err::from_errno(ENODEV, "RDMA_OPTION_IB_PATH: no device has the GID " + sgid.to_string());
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::set_route);
  if (!row) return err::inval("RDMA_OPTION_IB_PATH: the address is not resolved");
  id->port_ = port;
  id->dst_.addr = dgid;
  id->dgid_ = dgid;
  id->mtu_ = mtu ? std::min(mtu, mtu_enum(port->mtu())) : mtu_enum(port->mtu());
  id->route_ = true;
  enter(id, nullptr, *row);
  return {};
}

// ------------------------------------------------------------------ listen

Status Cm::listen(Id* id, int backlog) {
  if (id->state_ == State::idle) UROCE_TRY(bind(id, Endpoint{IpAddr::from_v4(0), 0}));
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::listen);
  if (!row) return err::inval(std::string("rdma_listen: the id is ") + to_string(id->state_));
  const uint64_t sid = service_id(id->ps_, id->src_.port);
  if (ids_.port_in_use(id, id->ps_, id->src_.addr, id->src_.port))
    return err::from_errno(EADDRINUSE, "rdma_listen: " + id->src_.to_string() + " is in use");
  UROCE_TRY(dir_.add_listener(id->src_.addr, sid));
  id->published_ = true;
  id->backlog_ = backlog > 0 ? std::min(backlog, cfg_.max_backlog) : cfg_.max_backlog;
  enter(id, nullptr, *row);
  ids_.add_listener(sid, id);
  retry_orphans(sid, false);  // requests that came a little early
  return {};
}

}  // namespace uroce::cm
