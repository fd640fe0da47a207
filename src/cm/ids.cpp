// IdTable: devices, ids, listeners, waiting requests, where MADs go.
#include "cm/ids.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "cm/cm.hpp"

namespace uroce::cm {

bool is_any_address(const IpAddr& a) noexcept { return a.is_unspecified() || a == IpAddr::from_v4(0); }

bool is_loopback_address(const IpAddr& a) noexcept {
  if (a.is_v4()) return (a.v4() >> 24) == 127;
  uint8_t raw[16] = {};
  raw[15] = 1;
  return a == IpAddr::from_bytes(raw);
}

namespace {

constexpr uint16_t kEphemeralLow = 32768;
constexpr uint16_t kEphemeralHigh = 60999;

// The service ID of a REQ (data offset 8) or SIDR_REQ (data offset 8).
uint64_t wire_sid(std::span<const uint8_t> mad) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = v << 8 | mad[kMadHeaderSize + 8 + i];
  return v;
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

GsiPort* IdTable::port_for_address(const IpAddr& a) const noexcept {
  for (GsiPort* p : ports_)
    if (p->address() == a) return p;
  return nullptr;
}

// The device to reach `dst` from: the one holding that very address; the
// one holding the kernel's source address for it; for a loopback
// destination a device on loopback (127.0.0.1 / ::1 first); else the first
// device of the same family.
GsiPort* IdTable::route_port(const IpAddr& dst) const noexcept {
  if (GsiPort* p = port_for_address(dst)) return p;
  if (auto src = kernel_source(dst))
    if (GsiPort* p = port_for_address(*src)) return p;
  if (is_loopback_address(dst)) {
    if (GsiPort* p = port_for_address(dst.is_v4() ? IpAddr::from_v4(0x7f000001) : *IpAddr::parse("::1"))) return p;
    for (GsiPort* p : ports_)
      if (is_loopback_address(p->address()) && p->address().is_v4() == dst.is_v4()) return p;
  }
  for (GsiPort* p : ports_)
    if (p->address().is_v4() == dst.is_v4()) return p;
  return nullptr;
}

// The device a loopback address no device holds binds to: the first of its
// family, else the first.
GsiPort* IdTable::loopback_bind_port(const IpAddr& a) const noexcept {
  for (GsiPort* p : ports_)
    if (p->address().is_v4() == a.is_v4()) return p;
  return ports_.empty() ? nullptr : ports_.front();
}

// ------------------------------------------------------------------ ports

void IdTable::note_bound(Id* id) { bound_.emplace(port_key(id->ps_, id->src_.port), id); }

bool IdTable::port_in_use(const Id* self, uint16_t ps, const IpAddr& addr, uint16_t port) const noexcept {
  const bool self_listens = self && self->state_ == State::listen;
  for (auto [it, end] = bound_.equal_range(port_key(ps, port)); it != end; ++it) {
    const Id* o = it->second;
    if (o == self || !o->bound_ || o->ps_ != ps || o->src_.port != port) continue;
    if (!overlap(o->src_.addr, o->afonly_, addr, self && self->afonly_)) continue;
    const bool both_reuse = self && self->reuseaddr_ && o->reuseaddr_;
    if (!both_reuse || self_listens || o->state_ == State::listen) return true;
  }
  return false;
}

uint16_t IdTable::ephemeral_port(uint16_t ps) {
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

Endpoint IdTable::request_endpoint(const IpAddr& dst, const IpAddr& dgid, uint64_t sid) const noexcept {
  if (auto slot = dir_.find_listener(dst, sid))
    if (auto port = dir_.port_of(*slot, dgid)) return {dgid, *port};
  return {dgid, kRoceV2Port};
}

Endpoint IdTable::reply_endpoint(const Endpoint& src, uint32_t peer_comm_id) const noexcept {
  if (src.port != kRoceV2Port) {
    const uint32_t slot = peer_comm_id >> 22;
    if (auto port = dir_.port_of(slot, src.addr); port && *port == src.port) return src;
  }
  return {src.addr, kRoceV2Port};
}

void IdTable::unlisten(Id* id) noexcept {
  const uint64_t sid = service_id(id->ps_, id->src_.port);
  for (auto [it, end] = listeners_.equal_range(sid); it != end; ++it)
    if (it->second == id) {
      listeners_.erase(it);
      break;
    }
  if (id->published_) dir_.remove_listener(id->src_.addr, sid);
  id->published_ = false;
}

void IdTable::release_listener(Id& child) noexcept {
  if (child.listener_) {
    --child.listener_->pending_;
    child.listener_ = nullptr;
  }
}

Id* IdTable::find_listener(uint64_t sid, const IpAddr& dst, bool ud) const noexcept {
  Id* wildcard = nullptr;
  for (auto [it, end] = listeners_.equal_range(sid); it != end; ++it) {
    Id* l = it->second;
    if ((l->qp_type_ == QpType::ud) != ud) continue;
    if (l->src_.addr == dst) return l;
    if (!wildcard && is_any_address(l->src_.addr) && overlap(l->src_.addr, l->afonly_, dst, false)) wildcard = l;
  }
  return wildcard;
}

IdTable::~IdTable() {
  for (Id* id : ids_) {
    if (id->published_) dir_.remove_listener(id->src_.addr, service_id(id->ps_, id->src_.port));
    delete id;
  }
}

void IdTable::destroy(Id* id) noexcept {
  // Children not yet accepted keep their own lives (the application got
  // them); they just forget their listener.
  // (pending_ counts them: no pass over every id for the others.)
  if (id->pending_ > 0)
    for (Id* other : ids_)
      if (other->listener_ == id) other->listener_ = nullptr;
  if (id->bound_)
    for (auto [it, end] = bound_.equal_range(port_key(id->ps_, id->src_.port)); it != end; ++it)
      if (it->second == id) {
        bound_.erase(it);
        break;
      }
  ids_.erase(id);
  delete id;
}

bool IdTable::hold_orphan(GsiPort& port, const GsiMad& mad, uint32_t peer_comm_id, Clock::time_point deadline) {
  for (const Orphan& o : orphans_)
    if (o.src.addr == mad.src.addr && o.peer_comm_id == peer_comm_id) return false;  // a repeat
  Orphan o;
  o.port = &port;
  std::copy(mad.data.begin(), mad.data.begin() + kMadSize, o.mad.begin());
  o.src = mad.src;
  o.dst = mad.dst;
  o.sid = wire_sid(mad.data);
  o.peer_comm_id = peer_comm_id;
  o.deadline = deadline;
  orphans_.push_back(o);
  return true;
}

std::vector<Orphan> IdTable::take_orphans(uint64_t sid, Clock::time_point now) {
  std::vector<Orphan> out;
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    if (sid ? it->sid == sid : it->deadline <= now) {
      out.push_back(*it);
      it = orphans_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

IdTable::Clock::time_point IdTable::next_orphan_deadline(Clock::time_point next) const noexcept {
  for (const Orphan& o : orphans_) next = std::min(next, o.deadline);
  return next;
}

}  // namespace uroce::cm
