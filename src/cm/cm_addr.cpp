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
namespace {

constexpr uint16_t kEphemeralLow = 32768;
constexpr uint16_t kEphemeralHigh = 60999;

bool is_any(const IpAddr& a) { return a.is_unspecified() || a == IpAddr::from_v4(0); }

bool is_loopback(const IpAddr& a) {
  if (a.is_v4()) return (a.v4() >> 24) == 127;
  IpAddr one;
  uint8_t raw[16] = {};
  raw[15] = 1;
  one = IpAddr::from_bytes(raw);
  return a == one;
}

// The source address the kernel would use to reach `dst` (a UDP socket
// connected to it), if it has a route.
std::optional<IpAddr> kernel_source(const IpAddr& dst) {
  sockaddr_storage ss;
  const socklen_t len = Endpoint{dst, 9}.to_sockaddr(ss);
  const int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<IpAddr> out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    sockaddr_storage local;
    socklen_t llen = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0)
      if (auto ep = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&local), llen)) out = ep->addr;
  }
  ::close(fd);
  return out;
}

// Two bound addresses overlap if equal or if one is the unspecified address
// of the other's family (or :: without AFONLY, which takes IPv4 too).
bool overlap(const IpAddr& a, bool a_afonly, const IpAddr& b, bool b_afonly) {
  if (a == b) return true;
  auto covers = [](const IpAddr& any, bool afonly, const IpAddr& x) {
    if (any == IpAddr::from_v4(0)) return x.is_v4();
    if (any.is_unspecified()) return !x.is_v4() || !afonly;
    return false;
  };
  return covers(a, a_afonly, b) || covers(b, b_afonly, a);
}

}  // namespace

// ------------------------------------------------------------------ devices

GsiPort* Cm::port_for_address(const IpAddr& a) const noexcept {
  for (GsiPort* p : ports_)
    if (p->address() == a) return p;
  return nullptr;
}

// The device to reach `dst` from: the one holding that very address; the
// one holding the kernel's source address for it; for a loopback
// destination a device on loopback (127.0.0.1 / ::1 first); else the first
// device of the same family.
GsiPort* Cm::route_port(const IpAddr& dst) const noexcept {
  if (GsiPort* p = port_for_address(dst)) return p;
  if (auto src = kernel_source(dst))
    if (GsiPort* p = port_for_address(*src)) return p;
  if (is_loopback(dst)) {
    if (GsiPort* p = port_for_address(dst.is_v4() ? IpAddr::from_v4(0x7f000001) : *IpAddr::parse("::1"))) return p;
    for (GsiPort* p : ports_)
      if (is_loopback(p->address()) && p->address().is_v4() == dst.is_v4()) return p;
  }
  for (GsiPort* p : ports_)
    if (p->address().is_v4() == dst.is_v4()) return p;
  return nullptr;
}

// The device a loopback address no device holds binds to: the first of its
// family, else the first.
GsiPort* Cm::loopback_bind_port(const IpAddr& a) const noexcept {
  for (GsiPort* p : ports_)
    if (p->address().is_v4() == a.is_v4()) return p;
  return ports_.empty() ? nullptr : ports_.front();
}

// ------------------------------------------------------------------ ports

bool Cm::port_in_use(const Id* self, uint16_t ps, const IpAddr& addr, uint16_t port) const noexcept {
  const bool self_listens = self && self->state_ == State::listen;
  for (const Id* o : ids_) {
    if (o == self || !o->bound_ || o->ps_ != ps || o->src_.port != port) continue;
    if (!overlap(o->src_.addr, o->afonly_, addr, self && self->afonly_)) continue;
    const bool both_reuse = self && self->reuseaddr_ && o->reuseaddr_;
    if (!both_reuse || self_listens || o->state_ == State::listen) return true;
  }
  return false;
}

uint16_t Cm::ephemeral_port(uint16_t ps) {
  std::uniform_int_distribution<uint32_t> pick(kEphemeralLow, kEphemeralHigh);
  for (int i = 0; i < 1000; ++i) {
    const uint16_t p = uint16_t(pick(rng_));
    if (port_in_use(nullptr, ps, IpAddr{}, p)) continue;
    // A listener of another process on this port would make our REQs look
    // like theirs to nobody, but a bound port of ours must not be one that
    // is listened on here: the Directory knows.
    if (dir_.find_listener(IpAddr::from_v4(0), service_id(ps, p))) continue;
    return p;
  }
  return 0;
}

// ------------------------------------------------------------------ where MADs go

Endpoint Cm::request_endpoint(const IpAddr& dst, const IpAddr& dgid, uint64_t sid) const noexcept {
  if (auto slot = dir_.find_listener(dst, sid))
    if (auto port = dir_.port_of(*slot, dgid)) return {dgid, *port};
  return {dgid, kRoceV2Port};
}

Endpoint Cm::reply_endpoint(const Endpoint& src, uint32_t peer_comm_id) const noexcept {
  if (src.port != kRoceV2Port) {
    const uint32_t slot = peer_comm_id >> 22;
    if (auto port = dir_.port_of(slot, src.addr); port && *port == src.port) return src;
  }
  return {src.addr, kRoceV2Port};
}

// ------------------------------------------------------------------ bind / resolve

Status Cm::bind(Id* id, const Endpoint& addr) {
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::bind);
  if (!row) return err::inval("rdma_bind_addr: the id is already bound");
  GsiPort* port = nullptr;
  if (!is_any(addr.addr)) {
    port = port_for_address(addr.addr);
    // A loopback address no device holds binds to the first device, as the
    // kernel's rdma_cm does (libfabric's verbs provider binds "localhost"
    // to find a device when given no address).
    if (!port && is_loopback(addr.addr)) port = loopback_bind_port(addr.addr);
    if (!port)
      return err::from_errno(ENODEV, "rdma_bind_addr: no uroce device has the address " + addr.addr.to_string() +
                                         " (UROCE_ADDR lists the devices)");
  }
  uint16_t p = addr.port;
  if (p == 0) {
    p = ephemeral_port(id->ps_);
    if (p == 0) return err::from_errno(EADDRNOTAVAIL, "rdma_bind_addr: no free port");
  } else if (port_in_use(id, id->ps_, addr.addr, p)) {
    return err::from_errno(EADDRINUSE, "rdma_bind_addr: " + Endpoint{addr.addr, p}.to_string() + " is in use");
  }
  id->port_ = port;
  id->src_ = {addr.addr, p};
  id->bound_ = true;
  enter(id, nullptr, *row);
  return {};
}

Status Cm::resolve_addr(Id* id, const std::optional<Endpoint>& src, const Endpoint& dst) {
  if (is_any(dst.addr)) return err::inval("rdma_resolve_addr: no destination address");
  if (src && id->state_ == State::idle) UROCE_TRY(bind(id, *src));
  OpLock g(*this);
  const fsm::Row* row = row_for(id, nullptr, fsm::Ev::resolve_addr);
  if (!row) return err::inval(std::string("rdma_resolve_addr: the id is ") + to_string(id->state_));
  if (id->state_ == State::addr_bound && !is_any(id->src_.addr) && id->src_.addr.is_v4() != dst.addr.is_v4())
    return err::inval("rdma_resolve_addr: source and destination are of different families");
  GsiPort* port = id->port_;
  if (!port) port = route_port(dst.addr);
  if (!port || dst.addr.is_multicast()) {
    enter(id, nullptr, *row, /*failed=*/true);  // the state stays
    emit_simple(id, EventType::addr_error, -(port ? EOPNOTSUPP : ENODEV));
    return {};
  }
  if (id->state_ == State::idle) {
    const uint16_t p = ephemeral_port(id->ps_);
    if (p == 0) return err::from_errno(EADDRNOTAVAIL, "rdma_resolve_addr: no free port");
    id->src_.port = p;
    id->bound_ = true;
  }
  id->port_ = port;
  id->src_.addr = port->address();
  id->dst_ = dst;
  // A loopback destination no device holds means this host, as for the
  // kernel, when the device is on a real interface; devices on loopback
  // addresses (uroce's one-machine setups) are hosts of their own.
  const bool to_self = is_loopback(dst.addr) && !port_for_address(dst.addr) && !is_loopback(port->address());
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
  GsiPort* port = port_for_address(sgid);
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
  if (port_in_use(id, id->ps_, id->src_.addr, id->src_.port))
    return err::from_errno(EADDRINUSE, "rdma_listen: " + id->src_.to_string() + " is in use");
  UROCE_TRY(dir_.add_listener(id->src_.addr, sid));
  id->published_ = true;
  id->backlog_ = backlog > 0 ? std::min(backlog, cfg_.max_backlog) : cfg_.max_backlog;
  enter(id, nullptr, *row);
  listeners_.emplace(sid, id);
  retry_orphans(sid, false);  // requests that came a little early
  return {};
}

void Cm::unlisten(Id* id) noexcept {
  const uint64_t sid = service_id(id->ps_, id->src_.port);
  for (auto [it, end] = listeners_.equal_range(sid); it != end; ++it)
    if (it->second == id) {
      listeners_.erase(it);
      break;
    }
  if (id->published_) dir_.remove_listener(id->src_.addr, sid);
  id->published_ = false;
}

void Cm::release_listener(Id& child) noexcept {
  if (child.listener_) {
    --child.listener_->pending_;
    child.listener_ = nullptr;
  }
}

Id* Cm::find_listener(uint64_t sid, const IpAddr& dst, bool ud) const noexcept {
  Id* wildcard = nullptr;
  for (auto [it, end] = listeners_.equal_range(sid); it != end; ++it) {
    Id* l = it->second;
    if ((l->qp_type_ == QpType::ud) != ud) continue;
    if (l->src_.addr == dst) return l;
    if (!wildcard && is_any(l->src_.addr) && overlap(l->src_.addr, l->afonly_, dst, false)) wildcard = l;
  }
  return wildcard;
}

}  // namespace uroce::cm
