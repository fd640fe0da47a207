// The requester's send window: how many packets an RC QP keeps
// unacknowledged.  Loss-based AIMD, the simplest congestion control: a
// loss halves the window once per window of packets in flight (later losses
// of the same window are the same event), a retransmission timeout takes
// it to the minimum, and every window's worth of acknowledged packets adds
// kWindowGrowPkts.  On loopback losses mean overflowing socket buffers; on a
// lossy link a small window also bounds what go-back-N resends per loss.
#include <algorithm>

#include "transport/psn.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {

void window_on_loss(Nic& nic, QpEngine& qp, bool timeout) noexcept {
  RequesterState& r = qp.req;
  if (!timeout && r.recovery == Recovery::after_cut && psn_before(r.una_psn, r.recover_psn)) return;
  const uint32_t w = window_pkts(qp);
  const uint32_t cut = timeout ? kMinWindowPkts : std::max(kMinWindowPkts, w / 2);
  r.cwnd = cut;
  r.cwnd_acked = 0;
  r.recover_psn = r.next_psn;
  transition(qp.qpn(), r.recovery, Recovery::after_cut);
  if (cut < w) ++nic.counters().req_window_cuts;
}

void window_on_ack(QpEngine& qp, uint32_t acked) noexcept {
  RequesterState& r = qp.req;
  if (r.recovery == Recovery::after_cut && !psn_before(psn_add(r.una_psn, acked), r.recover_psn))
    transition(qp.qpn(), r.recovery, Recovery::none);
  if (r.cwnd == 0) return;  // at the maximum
  r.cwnd_acked += acked;
  while (r.cwnd_acked >= r.cwnd && r.cwnd != 0) {
    r.cwnd_acked -= r.cwnd;
    r.cwnd += kWindowGrowPkts;
    if (r.cwnd >= max_window_pkts(qp)) r.cwnd = 0;
  }
}

}  // namespace uroce::transport
