// The Cm's watch over the other end of each connection.  A process killed
// outright sends no DREQ (on Linux its kernel would), so: a peer that is a
// process of this host (its comm ID's registry slot publishes the port its
// MADs came from) is checked for life every Config::peer_check; any other
// established peer gets a keep-alive probe every Config::keepalive (a
// Get(ClassPortInfo) naming one of its comm IDs, which a uroce CM answers
// for the processes of its host and any other CM answers "unsupported").
// A dead peer's connections take the table's peer_gone row (fsm.hpp).
// Part of the Cm: called under its lock; it owns only its own timers and
// probes and reads the connection records through the Cm.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>

#include "cm/gsi.hpp"
#include "cm/mad.hpp"
#include "common/ip_addr.hpp"

namespace uroce::cm {

class Cm;
struct Conn;

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Liveness(Cm& cm) noexcept : cm_(cm) {}

  // Watches the peer of `c` if it is a process of this host: it sent `src`
  // with comm ID `peer_comm_id`.
  void note_peer(Conn& c, const Endpoint& src, uint32_t peer_comm_id) noexcept;
  // Runs the checks and probes due at `t`.
  void on_timer(Clock::time_point t) noexcept;
  // The earlier of `next` and the next check or probe some connection needs.
  Clock::time_point next_deadline(Clock::time_point next) const noexcept;
  // A keep-alive probe from a peer, and the answer to ours.
  void on_probe(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept;
  void on_probe_answer(const MadHeader& h) noexcept;

  // Connections whose peer the registry watches / keep-alive probes.
  static bool watched(const Conn& c) noexcept;
  static bool probed(const Conn& c) noexcept;

 private:
  // One peer process: its CM's address and port, its comm IDs' slot bits.
  using ProbeKey = std::tuple<IpAddr, uint16_t, uint32_t>;
  struct Probe {
    GsiPort* port = nullptr;
    Endpoint to;
    uint32_t comm_id = 0;  // one of its comm IDs, named in the probe
    uint64_t tid = 0;      // of the probe awaiting an answer; 0: none
    int unanswered = 0;
  };
  void check_peers() noexcept;
  void keepalive() noexcept;
  void group_gone(const ProbeKey& key) noexcept;

  Cm& cm_;
  Clock::time_point next_peer_check_{};
  std::map<ProbeKey, Probe> probes_;
  Clock::time_point next_keepalive_{};
};

}  // namespace uroce::cm
