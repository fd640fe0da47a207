// The requester's side of selective repeat, and its RTT estimate
// (docs/congestion.md).
//
// A responder that keeps the packets following a lost one (reorder.hpp)
// needs only the lost one again.  Nothing on the wire says whether a peer
// does, and nothing needs to: the first recovery finds out.  On a sequence
// NAK for P the requester resends P alone, asking for an ACK.  If the next
// acknowledgement covers P+1 and P+2 as well (sent before, not resent; one
// could have been merely overtaken by P), the peer kept them: from then on
// every NAK is answered by resending the named packet only, with the rest of
// its GSO train if it was sent first in one (run_from).  A NAK for the
// next missing PSN moves the probe on to it (a burst lost).  An ACK that
// stops short: nothing was kept (or the rest was lost too), and the
// requester goes back N from there, having sent exactly the packets
// go-back-N sends, one round trip later.  After kProbes such answers the
// peer is taken for a go-back-N responder (rdma_rxe, a NIC) and treated as
// one.
#include <algorithm>

#include "common/log.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {

namespace {

using namespace std::chrono_literals;

constexpr uint8_t kProbes = 8;
constexpr uint8_t kProbeSteps = 16;                         // a probe follows a burst at most this far
constexpr uint32_t kMaxRun = 64;                            // the longest run resent at once (a GSO train)
constexpr std::chrono::nanoseconds kFirstResendWait = 1ms;  // before any RTT sample

// How long a packet resent alone may go unacknowledged before it is resent
// again: about two round trips, never longer than the QP's own timeout.
std::chrono::nanoseconds resend_wait(const Nic& nic, const QpEngine& qp) noexcept {
  const RequesterState& r = qp.req;
  std::chrono::nanoseconds t =
      r.srtt_ns == 0 ? kFirstResendWait : std::chrono::nanoseconds(2 * r.srtt_ns + 4 * r.rttvar_ns);
  t = std::max<std::chrono::nanoseconds>(t, nic.config().cc.resend_wait_min) * r.sr_backoff;
  return std::min(t, retransmit_interval(qp.attr.timeout));
}

// Watches una: if it has not moved by sr_check_at, its packet goes again
// (a lost resend, a lost NAK, a lost last ACK), waiting twice as long each
// time.
void watch(Nic& nic, QpEngine& qp, uint32_t psn) noexcept {
  RequesterState& r = qp.req;
  // A READ hole before it is what blocks una: it stays watched.
  if (r.read_watch && psn_before(r.una_psn, psn)) psn = r.una_psn;
  r.sr_check = true;
  r.sr_check_psn = psn;
  r.sr_backoff = 1;
  r.sr_check_at = nic.now() + resend_wait(nic, qp);
  nic.arm_timer(qp, r.sr_check_at);
}

constexpr uint8_t kSplitStep = 4, kSplitOn = 8, kSplitMax = 32;  // note_nak
static_assert(kTrainPsns >= kMaxWindowPkts, "every PSN in flight has its train bit");
static_assert(((kPsnMask + 1) % kTrainPsns) == 0, "train bits stay put across the PSN wrap");

// The first packet of the run last resent.
uint32_t run_first(const RequesterState& r) noexcept { return psn_add(r.run_end, (kPsnMask + 1) - r.run_len); }

// How many packets to resend from `psn`, missing at the peer.  What the
// network drops together is a GSO train (a full queue, a socket buffer, a
// firewall see one datagram), so a packet that left first in its train is
// resent with the rest of that train; one that left inside a train is not
// (the packets before it arrived: the train was not dropped whole).  Without
// GSO every packet is its own train.  (Guessing longer runs, as doubling
// them while NAKs follow each other does, resends packets the peer kept into
// the very queue that dropped the others.)  Where trains are cut into
// packets before the loss (a NIC's segmentation, a tbf's for trains above
// its burst), a full queue drops some packets of a train and not others:
// while the NAKs say so (note_nak), only what they name goes again.
uint32_t run_from(const RequesterState& r, uint32_t psn) noexcept {
  if (r.split_trains || !r.train_first[psn % kTrainPsns]) return 1;
  uint32_t n = 1;
  while (n < kMaxRun && psn_before(psn_add(psn, n), r.sent_hwm) && !r.train_first[psn_add(psn, n) % kTrainPsns]) ++n;
  return n;
}

// `psn` is in the run last resent, after its first packet: the NAK was
// drawn by an earlier packet of the run, before this one's resend arrived.
bool later_in_run(const RequesterState& r, uint32_t psn) noexcept {
  return psn_before(run_first(r), psn) && psn_before(psn, r.run_end);
}

// What a NAK says of the path: one that names a packet that left inside a
// train means the packet before it arrived from that train -- part of a
// train was lost; one that names a train's first packet fits whole trains.
// (One naming the first packet of the run resent last, or the packet right
// after that run, whose predecessor came as a resend, says neither.)  A
// score with hysteresis: each of the first kind adds 4 (up to 32), each of
// the second takes 1; at 8 runs go off, at 0 on again.  A socket buffer
// that overflows in the middle of a train now and then does not turn them
// off; a path that cuts trains keeps them off.
void note_nak(Nic& nic, RequesterState& r, uint32_t psn) noexcept {
  if (psn == run_first(r) || psn == r.run_end) return;
  if (r.train_first[psn % kTrainPsns]) {
    if (r.split_score > 0 && --r.split_score == 0) r.split_trains = false;
    return;
  }
  r.split_score = uint8_t(std::min<uint32_t>(kSplitMax, r.split_score + kSplitStep));
  if (r.split_score >= kSplitOn && !r.split_trains) {
    r.split_trains = true;
    ++nic.counters().req_sr_trains_split;
  }
}

}  // namespace

bool sr_on_seq_nak(Nic& nic, QpEngine& qp, uint32_t psn) noexcept {
  RequesterState& r = qp.req;
  if (!nic.config().cc.selective_repeat || r.peer_sr == PeerSr::drops) return false;
  // Going back already (an earlier NAK, a timeout): that pass resends it.
  if (psn_before(r.send_psn, r.sent_hwm)) return false;
  // Nothing sent after it: resending it alone is go-back-N.
  if (!psn_before(psn_add(psn, 1), r.sent_hwm)) return false;
  uint32_t idx;
  if (!find_wqe(qp, psn, idx) || is_rd_atomic(qp.sq.at(idx).opcode)) return false;
  uint32_t n = 1;
  if (r.peer_sr == PeerSr::unknown) {
    if (r.probing && psn != r.probe_psn) return false;
    if (!r.probing) {
      r.probing = true;
      r.probe_psn = psn;
      r.probe_ext = 0;
    }
  } else if (later_in_run(r, psn) || sack_resent_lately(nic, r, psn)) {
    // Its resend is on the way; if that is lost too, the watch sends it
    // again.
    ++nic.counters().req_sr_stale_naks;
    return true;
  } else {
    note_nak(nic, r, psn);
    n = run_from(r, psn);
  }
  sack_want(nic, qp);  // (again: one may be lost)
  r.nak_resends = true;
  r.resend_psn = psn;
  r.resend_left = n;
  r.run_end = psn_add(psn, n);
  r.run_len = n;
  watch(nic, qp, psn);
  nic.schedule(qp);
  return true;
}

void sr_watch(Nic& nic, QpEngine& qp, uint32_t psn) noexcept {
  if (!qp.req.sr_check || qp.req.sr_check_psn != psn) watch(nic, qp, psn);
}

void sr_on_sent(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (r.una_psn == r.next_psn) r.read_watch = false;
  // (Or READ responses missing, read_keep.cpp: the watch asks again.)
  if ((r.peer_sr == PeerSr::keeps || r.read_watch) && !r.sr_check && r.una_psn != r.next_psn) watch(nic, qp, r.una_psn);
}

void sr_on_progress(Nic& nic, QpEngine& qp, bool nak) noexcept {
  RequesterState& r = qp.req;
  if (r.probing && psn_before(r.probe_psn, r.una_psn)) {
    // Two PSNs beyond the probe, sent before it and not resent: kept.  (One
    // beyond would also be a go-back-N responder's answer to a probe that
    // overtook its successor.)
    if (psn_before(psn_add(r.probe_psn, 2), r.una_psn)) {
      r.probing = false;
      if (r.peer_sr != PeerSr::keeps) {
        ++nic.counters().req_sr_peers;
        transition(qp.qpn(), r.peer_sr, PeerSr::keeps);
        sack_want(nic, qp);
        nic.schedule(qp);
      }
    } else if (nak && r.probe_ext < kProbeSteps) {
      // A NAK for the next PSN: it was lost as well (a burst), or the peer
      // dropped it after our resend.  Resend that one alone too and see.
      r.probe_psn = r.una_psn;
      ++r.probe_ext;
    } else {
      // Acknowledged up to the probe and no further: go back N from there.
      r.probing = false;
      ++nic.counters().req_sr_probes_failed;
      if (++r.sr_failed >= kProbes) transition(qp.qpn(), r.peer_sr, PeerSr::drops);
      if (psn_before(r.una_psn, r.sent_hwm) && !psn_before(r.send_psn, r.sent_hwm)) go_back(nic, qp, r.una_psn);
    }
  }
  // Acknowledged beyond the run last resent: it is done (una right after
  // it still tells the watch that the tail after a run is missing).
  if (r.run_len != 0 && psn_before(r.run_end, r.una_psn)) r.run_len = 0;
  if (r.sr_check && psn_before(r.sr_check_psn, r.una_psn)) {
    // Progress: watch the new una (a peer that keeps), or stop.
    r.sr_check = false;
    sr_on_sent(nic, qp);
  }
}

void sr_on_timer(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (!r.sr_check) return;
  if (r.una_psn == r.next_psn || psn_before(r.sr_check_psn, r.una_psn)) {
    r.sr_check = false;
    sr_on_sent(nic, qp);
    return;
  }
  if (nic.now() < r.sr_check_at) {
    nic.arm_timer(qp, r.sr_check_at);
    return;
  }
  r.sr_backoff = std::min<uint32_t>(r.sr_backoff * 2, 8);  // well inside the QP's own timeout
  uint32_t idx;
  if (find_wqe(qp, r.sr_check_psn, idx) && is_rd_atomic(qp.sq.at(idx).opcode)) {
    // A READ or an atomic unanswered for about two round trips: its request
    // goes again (a READ's from its first missing response: up to the
    // first kept if any are, read_keep.cpp; else with what follows it, as
    // the QP's timeout would send them) -- without using up one of its
    // retries, which under heavy loss a READ could otherwise exhaust (each
    // try needs its request and a response through).
    const uint32_t backoff = r.sr_backoff;
    const SendWqe& w = qp.sq.at(idx);
    const uint32_t missing = is_read(w.opcode) ? psn_add(w.first_psn, w.read_done) : w.first_psn;
    if (!is_read(w.opcode) || read_request_hole(nic, qp, w, missing, true) == HoleAsk::no)
      go_back(nic, qp, r.sr_check_psn);
    ++nic.counters().req_sr_rd_atomic_resends;
    r.sr_check = true;  // go_back stopped the watch: keep it, backing off
    r.sr_backoff = backoff;
    r.sr_check_at = nic.now() + resend_wait(nic, qp);
    nic.arm_timer(qp, r.sr_check_at);
    return;
  }
  if (r.peer_sr == PeerSr::drops) {
    // Watched for a READ hole, a go-back-N peer: what its timeout would
    // do, early.
    const uint32_t backoff = r.sr_backoff;
    go_back(nic, qp, r.sr_check_psn);
    r.sr_check = true;
    r.sr_backoff = backoff;
    r.sr_check_at = nic.now() + resend_wait(nic, qp);
    nic.arm_timer(qp, r.sr_check_at);
    return;
  }
  // No progress for about two round trips: the packet at una goes again,
  // with the rest of its train.  If it is the packet right after a run
  // resent and acknowledged, and no NAK came, nothing after it arrived
  // either (a packet after a gap draws a NAK at once): the tail was lost,
  // and goes again whole (at most kMaxRun packets of it).
  uint32_t n = run_from(r, r.sr_check_psn);
  if (r.run_len != 0 && r.sr_check_psn == r.run_end)
    n = std::max<uint32_t>(n, std::min<uint32_t>(kMaxRun, uint32_t(psn_diff(r.sent_hwm, r.sr_check_psn))));
  r.nak_resends = false;
  r.resend_left = n;
  r.resend_psn = r.sr_check_psn;
  r.run_end = psn_add(r.sr_check_psn, n);
  r.run_len = n;
  r.sr_check_at = nic.now() + resend_wait(nic, qp);
  nic.arm_timer(qp, r.sr_check_at);
  nic.schedule(qp);
}

void rtt_on_ack(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (!r.timing || !psn_before(r.timed_psn, r.una_psn)) return;
  r.timing = false;
  // (The system clock: see count_packet.)
  const int64_t m = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r.timed_at).count();
  // Timed from a resend whose hole was filled by the first sending after
  // all (reordered, not lost): the ACK came early.  Below the least clean
  // sample it is surely that; above it, indistinguishable and kept.
  if (r.reanchored && r.min_rtt_ns != 0 && m < r.min_rtt_ns) return;
  if (!r.reanchored) r.min_rtt_ns = r.min_rtt_ns == 0 ? m : std::min(r.min_rtt_ns, m);
  ++nic.counters().req_rtt_samples;
  if (r.reanchored) ++nic.counters().req_rtt_from_resends;
  if (r.srtt_ns == 0) {  // RFC 6298's estimator
    r.srtt_ns = m;
    r.rttvar_ns = m / 2;
  } else {
    r.rttvar_ns += (std::abs(r.srtt_ns - m) - r.rttvar_ns) / 4;
    r.srtt_ns += (m - r.srtt_ns) / 8;
  }
  nic.counters().srtt_us = uint64_t(r.srtt_ns / 1000);
  window_on_rtt(nic, qp, std::chrono::nanoseconds(m));
}

}  // namespace uroce::transport
