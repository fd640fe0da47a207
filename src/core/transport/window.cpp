// The requester's send window: how many packets an RC QP keeps
// unacknowledged.
//
// CcMode::swift (the default) with selective repeat, towards a peer that
// keeps what follows a loss (or may): the window follows the round-trip
// time (swift.hpp).  A sequence NAK is congestion only if the round trip
// showed a queue; a gap in READ responses (resent from the gap on) halves
// the window.
//
// Otherwise (a go-back-N peer, a peer on this host, UROCE_SR=0, UROCE_CC=dcqcn/none) loss-based AIMD, the simplest
// congestion control: a loss halves the window once per window of packets in flight (later losses of the same window
// are the same event; a peer that keeps turns a sequence NAK into one resend, so that is no cut), a retransmission
// timeout takes it to the minimum, and every window's worth of acknowledged packets adds kWindowGrowPkts.
#include <algorithm>

#include "transport/psn.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {
namespace {

// The swift window, as the requester reads it (0: the maximum).
void publish(Nic& nic, QpEngine& qp) noexcept {
  const uint32_t m = max_window_pkts(qp), w = qp.swift.window(m);
  qp.req.cwnd = w >= m ? 0 : w;
  nic.counters().cc_window = w;
}

// A loss of the window in flight when the window was last cut for one: the
// same event, no second cut.
bool same_loss_event(const RequesterState& r) noexcept {
  return r.recovery == Recovery::after_cut && psn_before(r.una_psn, r.recover_psn);
}

// The window was cut: losses before what is sent now belong to this event.
void start_recovery(QpEngine& qp) noexcept {
  qp.req.recover_psn = qp.req.next_psn;
  transition(qp.qpn(), qp.req.recovery, Recovery::after_cut);
}

void cut_on_loss(Nic& nic, QpEngine& qp, Loss loss) noexcept {
  RequesterState& r = qp.req;
  const bool timeout = loss == Loss::timeout;
  if (loss == Loss::seq_nak && r.peer_sr == PeerSr::keeps) return;
  if (!timeout && same_loss_event(r)) return;
  const uint32_t w = window_pkts(qp);
  const uint32_t cut = timeout ? kMinWindowPkts : std::max(kMinWindowPkts, w / 2);
  r.cwnd = cut;
  r.cwnd_acked = 0;
  start_recovery(qp);
  if (cut < w) ++nic.counters().req_window_cuts;
}

}  // namespace

// Between uroce peers (or while the peer may be one): towards a go-back-N
// peer every loss costs a window, and loss-based AIMD, which grows back
// faster, moved more through rdma_rxe at 1% loss (bench/lossy).
// Not to a peer on this host: no network queue lies on that path, and its
// round trips measure only when the two processes get a CPU.  On a loaded
// host (four CPU-bound processes on two CPUs) they reach milliseconds, and
// the delay-based window, cut to 3 packets, moved 72-140 MB/s where TCP
// moved 2.3 GB/s; what that path can overflow, the receiver's socket buffer
// or ring, shows as loss.
bool delay_based(const Nic& nic, const QpEngine& qp) noexcept {
  const CongestionConfig& cc = nic.config().cc;
  return cc.mode == CcMode::swift && cc.selective_repeat && qp.req.peer_sr != PeerSr::drops && !qp.host_local;
}

void window_on_loss(Nic& nic, QpEngine& qp, Loss loss) noexcept {
  if (!delay_based(nic, qp)) {
    // Only loss tells of a full path here; a delay-based window sees the
    // queue all the QPs on a path share and yields to it by itself.
    path_on_loss(nic, qp);
    return cut_on_loss(nic, qp, loss);
  }
  const SwiftParams& p = nic.config().cc.swift;
  const uint32_t m = max_window_pkts(qp);
  RequesterState& r = qp.req;
  const uint32_t before = qp.swift.window(m);
  if (loss == Loss::timeout) {
    qp.swift.on_timeout(p, nic.now(), m);
    if (qp.swift.window(m) < before) ++nic.counters().req_window_cuts;
  } else if (!same_loss_event(r)) {
    // Later losses of the window in flight are the same event.  A peer not
    // yet known to keep what follows a loss is taken to (its first losses
    // probe it); a READ response gap is resent from the gap on.
    const bool random = loss == Loss::seq_nak;
    if (qp.swift.on_loss(p, nic.now(), m, random)) {
      if (qp.swift.window(m) < before) ++nic.counters().req_window_cuts;
      start_recovery(qp);
    }
  }
  publish(nic, qp);
}

void window_on_rtt(Nic& nic, QpEngine& qp, Clock::duration rtt) noexcept {
  if (!delay_based(nic, qp)) return;
  const Swift::Verdict v = qp.swift.on_rtt(nic.config().cc.swift, rtt, nic.now(), max_window_pkts(qp));
  if (v == Swift::Verdict::cut) ++nic.counters().cc_delay_cuts;
  publish(nic, qp);
}

void window_on_ack(Nic& nic, QpEngine& qp, uint32_t acked) noexcept {
  path_on_ack(nic, qp, acked);
  RequesterState& r = qp.req;
  if (r.recovery == Recovery::after_cut && !psn_before(psn_add(r.una_psn, acked), r.recover_psn))
    transition(qp.qpn(), r.recovery, Recovery::none);
  if (r.cwnd == 0) return;  // at the maximum
  if (delay_based(nic, qp)) {
    qp.swift.on_ack(nic.config().cc.swift, acked, max_window_pkts(qp));
    if (qp.swift.started()) publish(nic, qp);
    return;
  }
  r.cwnd_acked += acked;
  while (r.cwnd_acked >= r.cwnd && r.cwnd != 0) {
    r.cwnd_acked -= r.cwnd;
    r.cwnd += kWindowGrowPkts;
    if (r.cwnd >= max_window_pkts(qp)) r.cwnd = 0;
  }
}

}  // namespace uroce::transport
