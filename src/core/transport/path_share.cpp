// The shared path of the QPs sending to one peer (path_share.hpp): the
// window arithmetic, then the engine's glue.
#include "transport/path_share.hpp"

#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {

void PathShare::recharge(uint32_t before, uint32_t after) noexcept {
  in_flight_ = in_flight_ - std::min(in_flight_, before) + after;
  if (before == 0 && after > 0) ++busy_qps_;
  if (before > 0 && after == 0 && busy_qps_ > 0) --busy_qps_;
}

bool PathShare::allows(uint32_t charge, uint32_t live, bool pass) const noexcept {
  const uint32_t others = busy_qps_ - (charge > 0 && busy_qps_ > 0 ? 1 : 0);
  if (others == 0 && waiters_.empty()) return true;
  const double all = double(in_flight_ - std::min(in_flight_, charge) + live);
  return all < window_ && (pass || waiters_.empty());
}

bool PathShare::on_loss(Clock::time_point now, Clock::duration gap) noexcept {
  if (busy_qps_ < 2) return false;
  if (limited() && now - last_cut_ < gap) return false;
  window_ = std::max(kMinPkts, std::min(window_, double(in_flight_)) / 2);
  acked_ = 0;
  last_cut_ = now;
  return true;
}

void PathShare::on_ack(uint32_t acked) noexcept {
  if (!limited()) return;
  acked_ += acked;
  while (acked_ >= window_ && limited()) {
    acked_ -= window_;
    window_ += kGrowPkts;
  }
  if (!limited()) window_ = kUnlimited;
}

bool PathShare::next_turn(uint32_t& qpn) noexcept {
  if (waiters_.empty() || double(in_flight_) >= window_) return false;
  qpn = waiters_.front();
  waiters_.pop_front();
  return true;
}

// ---------------------------------------------------------------- the glue

namespace {

bool shares(const Nic& nic, const QpEngine& qp) noexcept {
  const CongestionConfig& cc = nic.config().cc;
  return cc.share_paths && cc.mode != CcMode::none && qp.reliable() && !qp.xrc_recv();
}

// What `qp` has in flight, as its path counts it: nothing unless it sends.
uint32_t live(const QpEngine& qp) noexcept {
  const verbs::QpState st = qp.state();
  return st == verbs::QpState::rts || st == verbs::QpState::sqd ? in_flight(qp.req) : 0;
}

// QPs whose turn came, while the window has room: scheduled, each with a
// pass.  As many as there is room for (a QP woken sends at least one).
void wake(Nic& nic, PathShare& p) noexcept {
  uint32_t qpn;
  uint32_t room = p.in_flight() < p.window() ? uint32_t(p.window() - p.in_flight()) : 0;
  while (room > 0 && p.next_turn(qpn)) {
    QpEngine* q = nic.find_qp(qpn);
    if (!q || q->path != &p || !q->path_waiting) continue;  // gone, or moved to another path
    q->path_waiting = false;
    q->path_pass = true;
    nic.schedule(*q);
    --room;
  }
}

}  // namespace

void path_bind(Nic& nic, QpEngine& qp) noexcept {
  PathShare* to = shares(nic, qp) ? &nic.paths().at(qp.peer) : nullptr;
  if (to == qp.path) return;  // (the peer looked up again after a timeout, found where it was)
  path_unbind(nic, qp);
  qp.path = to;
  if (to) ++to->bound;
  path_sync(nic, qp);
}

void path_unbind(Nic& nic, QpEngine& qp) noexcept {
  if (!qp.path) return;
  PathShare& p = *qp.path;
  p.recharge(qp.path_charge, 0);
  qp.path_charge = 0;
  qp.path = nullptr;
  qp.path_waiting = qp.path_pass = false;
  wake(nic, p);
  if (p.bound > 0 && --p.bound == 0) {
    const Endpoint key = p.peer;
    nic.paths().erase(key);  // (p goes)
  }
}

void path_sync(Nic& nic, QpEngine& qp, bool turn_over) noexcept {
  if (!qp.path) return;
  PathShare& p = *qp.path;
  const uint32_t now = live(qp);
  if (turn_over) qp.path_pass = false;
  if (now != qp.path_charge) {
    p.recharge(qp.path_charge, now);
    qp.path_charge = now;
  }
  if (p.waiting()) wake(nic, p);
}

bool path_allows(Nic& nic, QpEngine& qp, bool rewound) noexcept {
  if (!qp.path) return true;
  PathShare& p = *qp.path;
  const uint32_t mine = in_flight(qp.req);
  if ((rewound && mine == 0) || p.allows(qp.path_charge, mine, qp.path_pass)) return true;
  if (mine > 0 && qp.req.tail_unasked) {
    qp.req.force_ack = true;
    return true;
  }
  if (!qp.path_waiting) {
    qp.path_waiting = true;
    // Its turn came and others took the room meanwhile: first again.
    if (qp.path_pass)
      p.wait_first(qp.qpn());
    else
      p.wait(qp.qpn());
    ++nic.counters().path_waits;
  }
  qp.path_pass = false;
  // (The end of this send pass syncs the QP's charge and, if that leaves
  // room, wakes whoever's turn it is.)
  return false;
}

void path_on_loss(Nic& nic, QpEngine& qp) noexcept {
  if (!qp.path) return;
  // One cut per round trip of the QP that saw it (at least 100 us: a
  // host's round trips are mostly its scheduler's).
  const auto rtt = std::chrono::nanoseconds(std::max<int64_t>(qp.req.srtt_ns, 100'000));
  if (qp.path->on_loss(nic.now(), rtt)) ++nic.counters().path_cuts;
}

void path_on_ack(Nic&, QpEngine& qp, uint32_t acked) noexcept {
  if (qp.path) qp.path->on_ack(acked);
}

}  // namespace uroce::transport
