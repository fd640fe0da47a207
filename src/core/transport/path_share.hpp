// The path to one peer endpoint, shared by the RC QPs of a NIC that send to
// it.  Each QP's window (window.cpp) reacts to its own losses only, and the
// least windows of many QPs add up: 1,024 QPs writing to one peer process
// kept 16,384 packets (64 MiB at MTU 4096) in flight against a receive
// socket buffer of a few MiB, so about one packet in ten was dropped there
// and resent, and tail losses waited out retransmission timeouts.  A
// PathShare limits the packets all of them have in flight together, once
// at least two of them send: loss-based AIMD on the losses any of them
// sees (at most one cut per round trip), and QPs it holds back wait for
// room in FIFO order, so every QP gets its turn however small the share.
//
// A QP's charge is its in_flight() as last synchronised (path_sync); the
// path's in_flight is the sum of the charges.  Pure state and arithmetic
// here (time comes in as an argument); the engine's glue is path_share.cpp.
// NIC lock held for all of it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>

#include "common/ip_addr.hpp"
#include "transport/work_queue.hpp"  // Clock

namespace uroce::transport {

class Nic;
class QpEngine;

class PathShare {
 public:
  // The window before the first loss: no limit in practice.
  static constexpr double kUnlimited = 1 << 20;
  // The least window: packets all QPs together keep in flight after cuts.
  static constexpr double kMinPkts = 32;
  // Packets the window grows by per window's worth acknowledged.
  static constexpr double kGrowPkts = 8;

  uint32_t in_flight() const noexcept { return in_flight_; }
  uint32_t busy_qps() const noexcept { return busy_qps_; }
  double window() const noexcept { return window_; }
  bool limited() const noexcept { return window_ < kUnlimited; }

  // A QP's charge moves from `before` to `after` packets.
  void recharge(uint32_t before, uint32_t after) noexcept;
  // Whether a QP that has `charge` packets charged and `live` in flight
  // now may send one more: always when no other QP has packets in flight
  // and none waits (one QP alone keeps its own window); otherwise while all
  // of them together stay under the window, and, while QPs wait, only a QP
  // woken for its turn (`pass`).
  bool allows(uint32_t charge, uint32_t live, bool pass) const noexcept;
  // A loss: the window takes half of what was in flight (at least
  // kMinPkts), unless it was cut less than `gap` ago (the same event) or
  // fewer than two QPs send.  True if it was cut.
  bool on_loss(Clock::time_point now, Clock::duration gap) noexcept;
  // `acked` packets were acknowledged: kGrowPkts more per window's worth.
  void on_ack(uint32_t acked) noexcept;

  // QPs held back (QP numbers, oldest first), each once; a QP whose turn
  // came but found the room taken goes back to the front.
  bool waiting() const noexcept { return !waiters_.empty(); }
  void wait(uint32_t qpn) { waiters_.push_back(qpn); }
  void wait_first(uint32_t qpn) { waiters_.push_front(qpn); }
  // Takes the next QP whose turn it is, if the window has room: (false)
  // when it has none or nobody waits.
  bool next_turn(uint32_t& qpn) noexcept;

  Endpoint peer;       // the table's key
  uint32_t bound = 0;  // QPs bound to the path (path_bind): the table lets it go at none

 private:
  uint32_t in_flight_ = 0, busy_qps_ = 0;
  double window_ = kUnlimited;
  double acked_ = 0;  // acknowledged since the window last grew
  Clock::time_point last_cut_{};
  std::deque<uint32_t> waiters_;
};

// The NIC's paths, one per peer endpoint that QPs send to (QPs hold
// pointers to them): a path goes when its last QP leaves, so a server that
// many short-lived clients came and went keeps none of theirs.
class PathTable {
 public:
  PathShare& at(const Endpoint& peer) {
    std::unique_ptr<PathShare>& p = paths_[peer];
    if (!p) {
      p = std::make_unique<PathShare>();
      p->peer = peer;
    }
    return *p;
  }
  void erase(const Endpoint& peer) { paths_.erase(peer); }
  size_t size() const noexcept { return paths_.size(); }

 private:
  std::map<Endpoint, std::unique_ptr<PathShare>> paths_;
};

// ---- the engine's glue (path_share.cpp) ----
// `qp` sends to `qp.peer` now (connected, or its peer moved): its charge
// moves to that path.  RC and XRC senders only; off with UROCE_CC=none
// or UROCE_PATH_SHARE=0.
void path_bind(Nic& nic, QpEngine& qp) noexcept;
// `qp` leaves its path (reset, destroyed): its charge goes.
void path_unbind(Nic& nic, QpEngine& qp) noexcept;
// `qp`'s packets in flight changed (sent, acknowledged, resent, flushed):
// its charge follows; QPs waiting get their turn if that made room.
// `turn_over`: the requester's send pass ended (its turn, if it had one,
// with it).
void path_sync(Nic& nic, QpEngine& qp, bool turn_over = false) noexcept;
// Whether `qp` may send its next packet; if not, it waits for its turn
// (scheduled then).  A packet sent before and `rewound` to (go-back-N
// after a loss) may always go when the QP has nothing else in flight: its
// retransmission timer runs meanwhile, and must not run out while the QP
// waits for a turn.  Nor may a QP wait whose last packet out asked for no
// ACK (sent before the path was limited): one more goes, asking for one
// (RequesterState::force_ack), or nothing would acknowledge the packets
// it waits on before its retransmission timer.
bool path_allows(Nic& nic, QpEngine& qp, bool rewound) noexcept;
// `qp` saw a loss (a new event for its own window) / an acknowledgement.
void path_on_loss(Nic& nic, QpEngine& qp) noexcept;
void path_on_ack(Nic& nic, QpEngine& qp, uint32_t acked) noexcept;

}  // namespace uroce::transport
