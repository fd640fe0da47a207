// The Cm's ids and what they take of the host: the devices (QP1 of each),
// the rdma_cm ids, the listeners by service ID and their bound ports, the
// requests waiting for a listener, and where MADs go (the same-host rules
// of cm.hpp).  Part of the Cm: called under its lock.  The operations that
// move an id (bind, resolve, listen) are the Cm's, through the table.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "cm/gsi.hpp"
#include "cm/mad.hpp"
#include "common/ip_addr.hpp"

namespace uroce::cm {

class Id;

// The unspecified address of either family.
bool is_any_address(const IpAddr& a) noexcept;
// 127.0.0.0/8 or ::1.
bool is_loopback_address(const IpAddr& a) noexcept;

// A REQ or SIDR_REQ that came before its listener (Config::no_listener_grace).
struct Orphan {
  GsiPort* port = nullptr;
  MadBuf mad;
  Endpoint src;
  IpAddr dst;
  uint64_t sid = 0;
  uint32_t peer_comm_id = 0;
  std::chrono::steady_clock::time_point deadline;
};

class IdTable {
 public:
  using Clock = std::chrono::steady_clock;
  IdTable(Directory& dir, std::mt19937_64& rng) noexcept : dir_(dir), rng_(rng) {}
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;
  ~IdTable();  // deletes the ids left, unpublishing their listeners

  // ---- devices
  void add_port(GsiPort& port) { ports_.push_back(&port); }
  GsiPort* port_for_address(const IpAddr& a) const noexcept;
  // The device to reach `dst` from (see ids.cpp).
  GsiPort* route_port(const IpAddr& dst) const noexcept;
  // The device a loopback address no device holds binds to.
  GsiPort* loopback_bind_port(const IpAddr& a) const noexcept;

  // ---- ids: owned here from create to destroy
  void insert(Id* id) { ids_.insert(id); }
  bool contains(const Id* id) const noexcept { return ids_.count(const_cast<Id*>(id)) != 0; }
  // Removes and deletes `id`; its children still waiting forget it.
  void destroy(Id* id) noexcept;

  // ---- ports and listeners
  // `id` is now bound to its src_ port in its port space (it stays so until
  // destroyed): port_in_use looks only at the ids bound to a port.
  void note_bound(Id* id);
  bool port_in_use(const Id* self, uint16_t ps, const IpAddr& addr, uint16_t port) const noexcept;
  uint16_t ephemeral_port(uint16_t ps);  // 0: none free
  void add_listener(uint64_t sid, Id* id) { listeners_.emplace(sid, id); }
  void unlisten(Id* id) noexcept;
  void release_listener(Id& child) noexcept;  // a pending child is accepted, rejected or gone
  Id* find_listener(uint64_t sid, const IpAddr& dst, bool ud) const noexcept;

  // ---- where MADs go
  // A request for service `sid` at `dst`: the UDP port of the process that
  // listens there (Directory), at `dgid`; else 4791.
  Endpoint request_endpoint(const IpAddr& dst, const IpAddr& dgid, uint64_t sid) const noexcept;
  // An answer to a peer's MAD from `src` (its comm ID `peer_comm_id`).
  Endpoint reply_endpoint(const Endpoint& src, uint32_t peer_comm_id) const noexcept;

  // ---- requests waiting for their listener
  // Holds `mad` until `deadline`; false if it is a repeat of one held.
  bool hold_orphan(GsiPort& port, const GsiMad& mad, uint32_t peer_comm_id, Clock::time_point deadline);
  // Takes those for service `sid` (0: those due at `now`).
  std::vector<Orphan> take_orphans(uint64_t sid, Clock::time_point now);
  Clock::time_point next_orphan_deadline(Clock::time_point next) const noexcept;

 private:
  Directory& dir_;
  std::mt19937_64& rng_;
  std::vector<GsiPort*> ports_;
  std::set<Id*> ids_;
  // The bound ids by port space << 16 | port: finding a free port costs one
  // look-up, not a pass over every id (cmtime: 10,000 connections spent
  // 370 us each in rdma_resolve_addr, most of it here).
  static uint32_t port_key(uint16_t ps, uint16_t port) noexcept { return uint32_t(ps) << 16 | port; }
  std::unordered_multimap<uint32_t, Id*> bound_;
  std::multimap<uint64_t, Id*> listeners_;  // by service ID
  std::vector<Orphan> orphans_;
};

}  // namespace uroce::cm
