// Liveness: the other end of each connection (see liveness.hpp).
#include "cm/liveness.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {
// ------------------------------------------------------------------ dead peers
//
// A process that exits with connections up leaves them to its kernel's CM on
// Linux, which sends the DREQ (or the REJ) for it: the peer gets
// DISCONNECTED (REJECTED) and does not wait forever.  A uroce process that
// dies -- killed, crashed -- sends nothing.  For peers that are processes of
// this host the registry says when they are gone, and the Cm then acts as if
// that MAD had come.

// The states whose peer the registry watches: those the table gives a
// peer_gone row.
bool Liveness::watched(const Conn& c) noexcept { return c.peer_slot != 0 && fsm::has_row(c.state, fsm::Ev::peer_gone); }

void Liveness::note_peer(Conn& c, const Endpoint& src, uint32_t peer_comm_id) noexcept {
  if (cm_.cfg_.peer_check.count() <= 0 || c.peer_slot != 0) return;
  const uint32_t slot = peer_comm_id >> 22;
  if (slot == 0 || slot == (cm_.dir_.slot() & 0x3ff)) return;  // not a registry comm ID, or ourselves
  const auto port = cm_.dir_.port_of(slot, src.addr);
  if (!port || *port != src.port) return;  // not (provably) that process
  c.peer_slot = slot;
  c.peer_src = src;
  const Clock::time_point t = cm_.now();
  if (next_peer_check_ <= t) next_peer_check_ = t + cm_.cfg_.peer_check;
  cm_.woke_ = true;
}

void Liveness::check_peers() noexcept {
  const Clock::time_point t = cm_.now();
  next_peer_check_ = t + cm_.cfg_.peer_check;
  std::map<std::pair<uint32_t, IpAddr>, bool> alive;  // one look per process and address
  std::vector<uint32_t> gone;
  for (const auto& [local, c] : cm_.conns_) {
    if (!watched(*c)) continue;
    auto [it, fresh] = alive.try_emplace({c->peer_slot, c->peer_src.addr}, true);
    if (fresh) {
      const auto port = cm_.dir_.port_of(c->peer_slot, c->peer_src.addr);
      it->second = port && *port == c->peer_src.port;
    }
    if (!it->second) gone.push_back(local);
  }
  for (uint32_t local : gone)
    if (Conn* c = cm_.conn_by_local(local)) cm_.peer_gone(*c);
}

// ------------------------------------------------------------------ keep-alive
//
// Peers the registry cannot vouch for (Config::keepalive).  Probes go per
// peer process, grouped by where its CM receives and the slot bits of its
// comm IDs; a group first seen in a round is probed from the next one, so a
// connection is probed only after it has been up a while.

bool Liveness::probed(const Conn& c) noexcept {
  return c.peer_slot == 0 && !c.ud && c.state == State::established && c.id;
}

void Liveness::keepalive() noexcept {
  const Clock::time_point t = cm_.now();
  next_keepalive_ = t + cm_.cfg_.keepalive;
  std::set<ProbeKey> seen;
  std::vector<ProbeKey> fresh;
  for (const auto& [local, c] : cm_.conns_) {
    if (!probed(*c)) continue;
    const auto key = std::make_tuple(c->peer.addr, c->peer.port, c->remote_id >> 22);
    if (!seen.insert(key).second) continue;
    auto [it, added] = probes_.try_emplace(key);
    Probe& p = it->second;
    p.port = c->port;
    p.to = c->peer;
    p.comm_id = c->remote_id;
    if (added) fresh.push_back(key);
  }
  std::vector<ProbeKey> gone;
  for (auto it = probes_.begin(); it != probes_.end();) {
    if (!seen.count(it->first)) {  // no connection to that process left
      it = probes_.erase(it);
      continue;
    }
    Probe& p = it->second;
    if (std::find(fresh.begin(), fresh.end(), it->first) != fresh.end()) {
      ++it;
      continue;
    }
    if (p.tid != 0 && ++p.unanswered >= cm_.cfg_.keepalive_misses) {
      gone.push_back(it->first);
      ++it;
      continue;
    }
    MadHeader h;
    h.method = kMethodGet;
    h.tid = p.tid = cm_.new_tid(p.comm_id);
    h.attr_mod = p.comm_id;
    MadBuf out;
    encode_class_port_info(h, 0, out);
    UROCE_LOG(debug, "cm: keep-alive probe to %s for comm 0x%08x (%d unanswered)", p.to.to_string().c_str(), p.comm_id,
              p.unanswered);
    p.port->send(p.to, out);
    ++it;
  }
  for (const auto& key : gone) {
    UROCE_LOG(info, "cm: %d keep-alive probes to %s unanswered: its connections end", cm_.cfg_.keepalive_misses,
              Endpoint{std::get<0>(key), std::get<1>(key)}.to_string().c_str());
    group_gone(key);
  }
}

void Liveness::group_gone(const ProbeKey& key) noexcept {
  probes_.erase(key);
  std::vector<uint32_t> ended;
  for (const auto& [local, c] : cm_.conns_)
    if (probed(*c) && std::make_tuple(c->peer.addr, c->peer.port, c->remote_id >> 22) == key) ended.push_back(local);
  for (uint32_t local : ended)
    if (Conn* c = cm_.conn_by_local(local)) cm_.peer_gone(*c);
}

// A probe from a peer: does the process holding `comm ID` (the attribute
// modifier) still live here?  Ourselves if it is one of our connections,
// else the registry (a process of this host that is not us).
void Liveness::on_probe(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept {
  const uint32_t comm = h.attr_mod;
  bool alive = true;  // a plain ClassPortInfo query (modifier 0)
  if (comm != 0) {
    if (const Conn* c = cm_.conn_by_local(comm)) {
      alive = c->state != State::closed;
    } else {
      const uint32_t slot = comm >> 22;
      alive = slot != 0 && slot != (cm_.dir_.slot() & 0x3ff) && cm_.dir_.port_of(slot, mad.dst).has_value();
    }
  }
  MadHeader r = h;
  r.method = kMethodGetResp;
  r.status = alive ? 0 : kMadStatusInvalidValue;
  MadBuf out;
  encode_class_port_info(r, cm_.cfg_.cm_response_timeout, out);
  port.send(mad.src, out);
}

void Liveness::on_probe_answer(const MadHeader& h) noexcept {
  for (auto& [key, p] : probes_) {
    if (p.tid == 0 || p.tid != h.tid) continue;
    p.tid = 0;
    p.unanswered = 0;
    if (h.status == kMadStatusInvalidValue) {
      UROCE_LOG(info, "cm: the peer CM at %s says the process of comm 0x%08x is gone", p.to.to_string().c_str(),
                p.comm_id);
      const auto k = key;
      group_gone(k);
    }
    return;
  }
}

void Liveness::on_timer(Clock::time_point t) noexcept {
  if (cm_.cfg_.peer_check.count() > 0 && next_peer_check_ <= t) check_peers();
  if (cm_.cfg_.keepalive.count() > 0 && next_keepalive_ <= t) keepalive();
}

Liveness::Clock::time_point Liveness::next_deadline(Clock::time_point next) const noexcept {
  if (cm_.cfg_.peer_check.count() > 0 && next_peer_check_ < next)
    for (const auto& [local, c] : cm_.conns_)
      if (watched(*c)) {
        next = next_peer_check_;
        break;
      }
  if (cm_.cfg_.keepalive.count() > 0 && next_keepalive_ < next)
    for (const auto& [local, c] : cm_.conns_)
      if (probed(*c)) {
        next = next_keepalive_;
        break;
      }
  return next;
}

}  // namespace uroce::cm
