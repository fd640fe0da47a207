// Completer: the requester's receive side (IBA 9.7.5.1.x, 9.7.5.2).
// ACKs retire WQEs in order; NAKs rewind, wait (RNR) or fail the WQE; READ
// responses and atomic ACKs deliver data.  A response for a PSN that is not
// outstanding is stale (a duplicate) or hostile: counted and ignored.
#include <cstring>

#include "common/log.hpp"
#include "transport/protocol.hpp"
#include "transport/requester.hpp"
#include "transport/sge.hpp"
#include "wire/copy.hpp"
#include "wire/opcode.hpp"

namespace uroce::transport {
namespace {

using verbs::WcStatus;

// Moves una forward to `una` and, if transmission had been rewound behind
// it, forward as well (the peer got those packets after all).
void advance_una(Nic& nic, QpEngine& qp, uint32_t una) noexcept {
  RequesterState& r = qp.req;
  if (!psn_before(r.una_psn, una)) return;
  window_on_ack(nic, qp, uint32_t(psn_diff(una, r.una_psn)));
  sack_on_advance(r, una);
  r.una_psn = una;
  if (r.hole_asked && !psn_before(una, r.asked_end)) r.hole_asked = false;  // answered
  rtt_on_ack(nic, qp);
  r.retry_left = qp.attr.retry_cnt;
  r.progress_at = nic.now();
  if (qp.attr.rnr_retry != 7) r.rnr_left = qp.attr.rnr_retry;
  r.deadline = nic.now() + retransmit_interval(qp.attr.timeout);
  if (r.una_psn == r.next_psn) transition(qp.qpn(), r.retry, RetryTimer::off);
  if (psn_before(r.send_psn, una)) {
    uint32_t idx;
    if (find_wqe(qp, una, idx)) {
      go_back(nic, qp, una);
    } else {  // everything assigned is acknowledged
      uint32_t i = qp.sq.head();
      while (i != qp.sq.tail() && qp.sq.at(i).assigned) ++i;
      r.send_idx = i;
      r.send_pkt = 0;
      r.send_psn = r.next_psn;
    }
  }
  path_sync(nic, qp);
  nic.schedule(qp);  // the window moved
}

// What ack_through did: acknowledged everything through `last`; went back
// N to a READ/atomic response missing (the caller stops); or asked for a
// READ's missing responses alone, una at the first (the caller may go on
// with PSNs after it, but completes nothing there).
enum class Acked : uint8_t { all, rewound, hole };

// A READ/atomic response before `last` is missing: asked for again (a
// READ's alone if responses after it are kept), una moved up to it.
Acked response_gap(Nic& nic, QpEngine& qp, SendWqe& w) noexcept {
  const uint32_t missing = psn_add(w.first_psn, w.read_done);
  if (psn_before(qp.req.una_psn, missing)) advance_una(nic, qp, missing);
  const HoleAsk ask = is_read(w.opcode) ? read_request_hole(nic, qp, w, missing) : HoleAsk::no;
  if (ask != HoleAsk::already) {
    ++nic.counters().req_read_gaps;
    window_on_loss(nic, qp, Loss::read_gap);
  }
  if (ask == HoleAsk::no) go_back(nic, qp, missing);
  retire(nic, qp);
  return ask == HoleAsk::no ? Acked::rewound : Acked::hole;
}

// Marks every WQE whose PSNs all lie at or before `last` as done, in order.
// A READ or atomic without its response stops the walk: its response was
// lost, so it is asked for again -- also a READ whose responses run on
// past `last` but miss one before it (the request for its next segment
// was lost, and what followed it drew the NAK or ACK for `last`).
Acked ack_through(Nic& nic, QpEngine& qp, uint32_t last) noexcept {
  auto& sq = qp.sq;
  for (uint32_t i = sq.head(); i != sq.tail(); ++i) {
    SendWqe& w = sq.at(i);
    if (!w.assigned) break;
    if (psn_diff(psn_add(w.first_psn, w.npkts - 1), last) > 0) {
      if (is_read(w.opcode) && !w.done && !psn_before(last, w.first_psn)) {
        read_absorb(qp.req, w);
        if (psn_before(psn_add(w.first_psn, w.read_done), psn_add(last, 1))) return response_gap(nic, qp, w);
        if (w.read_done == w.npkts) {  // all of it kept: complete, through its end
          w.done = true;
          --qp.req.rd_atomic;
          last = psn_add(w.first_psn, w.npkts - 1);
        }
      }
      break;
    }
    if (w.done) continue;
    if (is_rd_atomic(w.opcode)) {
      if (is_read(w.opcode) && read_absorb(qp.req, w) && w.read_done == w.npkts) {  // kept
        w.done = true;
        --qp.req.rd_atomic;
        continue;
      }
      return response_gap(nic, qp, w);
    }
    w.done = true;
  }
  retire(nic, qp);
  advance_una(nic, qp, psn_add(last, 1));
  return Acked::all;
}

void on_nak(Nic& nic, QpEngine& qp, uint32_t psn, uint8_t code) noexcept {
  Counters& c = nic.counters();
  // Everything before the NAKed PSN arrived.  (A READ response missing
  // before it: a sequence NAK is still answered; an error NAK is not, for
  // failing its WQE completes those before it -- the responder, in error
  // now, answers nothing more, and the READ ends by the retry count, as
  // rdma_rxe's does.)
  const Acked acked = ack_through(nic, qp, psn_add(psn, kPsnMask));
  if (acked == Acked::rewound || qp.state() == verbs::QpState::err) return;
  if (acked == Acked::hole && wire::NakCode(code) != wire::NakCode::psn_sequence_error) return;
  WcStatus st;
  switch (wire::NakCode(code)) {
    case wire::NakCode::psn_sequence_error:
      ++c.req_seq_naks_rcvd;
      window_on_loss(nic, qp, Loss::seq_nak);
      sr_on_progress(nic, qp, true);  // a probe the NAK settles goes first
      if (!sr_on_seq_nak(nic, qp, psn)) go_back(nic, qp, psn);
      return;
    case wire::NakCode::invalid_request: st = WcStatus::rem_inv_req_err; break;
    case wire::NakCode::remote_access_error: st = WcStatus::rem_access_err; break;
    case wire::NakCode::remote_operational_error: st = WcStatus::rem_op_err; break;
    case wire::NakCode::invalid_rd_request: st = WcStatus::rem_inv_rd_req_err; break;
    default: st = WcStatus::rem_op_err; break;
  }
  ++c.req_err_naks_rcvd;
  uint32_t idx;
  if (find_wqe(qp, psn, idx)) fail_wqe(nic, qp, idx, st);
}

void on_rnr_nak(Nic& nic, QpEngine& qp, uint32_t psn, uint8_t timer) noexcept {
  RequesterState& r = qp.req;
  ++nic.counters().req_rnr_naks_rcvd;
  const Acked acked = ack_through(nic, qp, psn_add(psn, kPsnMask));
  if (acked == Acked::rewound || qp.state() == verbs::QpState::err) return;
  uint32_t idx;
  if (!find_wqe(qp, psn, idx)) return;
  if (qp.attr.rnr_retry != 7) {
    // (Not while a READ response before it is missing: failing the WQE
    // would complete that READ.  The resend draws the RNR NAK again.)
    if (r.rnr_left == 0 && acked == Acked::hole) return;
    if (r.rnr_left == 0) {
      ++nic.counters().req_rnr_retry_exc;
      fail_wqe(nic, qp, idx, WcStatus::rnr_retry_exc_err);
      return;
    }
    --r.rnr_left;
  }
  go_back(nic, qp, psn);
  transition(qp.qpn(), r.rnr, RnrGate::waiting);
  r.rnr_until = nic.now() + rnr_delay(timer);
  // The peer answered: the ACK timeout runs from the resend after the wait
  // (an RNR wait longer than the timeout is no lost packet), as rdma_rxe's
  // timer restarts with each resend.
  r.progress_at = nic.now();
  r.deadline = r.rnr_until + retransmit_interval(qp.attr.timeout);
  nic.arm_timer(qp, r.rnr_until);
}

// Whether `size` bytes with opcode `flags` make response packet `i` of READ
// `w`.  Responses come FIRST..LAST per READ request, and a READ WQE is asked
// for in segments (and parts again after a loss), so LAST/ONLY may end a
// segment; only the WQE's final packet must be one.
bool fits(const QpEngine& qp, const SendWqe& w, uint32_t i, uint32_t flags, size_t size) noexcept {
  const bool last_pkt = i + 1 == w.npkts;
  const uint32_t want = last_pkt ? w.length - i * qp.mtu : qp.mtu;
  return (!last_pkt || (flags & wire::op::kLast)) && size == want;
}

// Consumes what was kept out of order once the responses before it are in:
// the READ at una takes the responses kept after it, and a response kept
// for a later READ acknowledges the SENDs and WRITEs before that READ.
void settle_kept(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  while (r.kept_count > 0 && qp.state() != verbs::QpState::err) {
    uint32_t idx;
    if (!find_wqe(qp, r.una_psn, idx)) return;
    SendWqe& w = qp.sq.at(idx);
    const uint32_t last = psn_add(w.first_psn, w.npkts - 1);
    if (is_rd_atomic(w.opcode)) {
      if (!is_read(w.opcode) || w.done || !read_absorb(r, w)) return;  // its missing response is asked for
      const uint32_t una = psn_add(w.first_psn, w.read_done);
      if (w.read_done == w.npkts) {
        w.done = true;
        --r.rd_atomic;
        retire(nic, qp);
      }
      advance_una(nic, qp, una);
      continue;
    }
    if (!psn_before(last, r.kept_implied) || ack_through(nic, qp, last) != Acked::all) return;
  }
}

// The READ WQE response `psn` belongs to, and its index; null (counted
// stale) if it belongs to none.
SendWqe* read_at(Nic& nic, QpEngine& qp, uint32_t psn, uint32_t& idx) noexcept {
  if (find_wqe(qp, psn, idx) && is_read(qp.sq.at(idx).opcode)) return &qp.sq.at(idx);
  ++nic.counters().req_stale_responses;
  return nullptr;
}

// One READ response or more placed (and those kept after them taken in):
// the PSN after what the READ has now, and whether that is all of it (the
// WQE then completes, and may be retired: w is not to be used after).
uint32_t read_placed(Nic& nic, QpEngine& qp, SendWqe& w, bool& all) noexcept {
  RequesterState& r = qp.req;
  read_absorb(r, w);
  transition(qp.qpn(), r.gap, ReadGap::none);
  const uint32_t next = psn_add(w.first_psn, w.read_done);
  all = w.read_done == w.npkts;
  if (all) {
    w.done = true;
    --r.rd_atomic;
    retire(nic, qp);
  }
  return next;
}

void on_read_response(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  RequesterState& r = qp.req;
  const uint32_t psn = pkt.hdr.bth.psn;
  uint32_t idx;
  SendWqe* wp = read_at(nic, qp, psn, idx);
  if (!wp) return;
  SendWqe& w = *wp;
  const uint32_t i = uint32_t(psn_diff(psn, w.first_psn));
  const uint32_t expected = psn_add(w.first_psn, w.read_done);
  if (w.done || i < w.read_done || read_kept(r, psn)) {  // a response we already have
    ++nic.counters().req_stale_responses;
    return;
  }
  const uint32_t flags = pkt.info->flags;
  if (!fits(qp, w, i, flags, pkt.payload.size())) {
    ++nic.counters().req_stale_responses;
    return;
  }
  // A READ response says the responder executed everything before the READ:
  // the oldest PSN still missing is that of an earlier READ/atomic without
  // its response, if there is one, else the next response of this READ.
  uint32_t missing = expected;
  bool earlier = false;
  if (psn_before(r.una_psn, w.first_psn)) {
    for (uint32_t k = qp.sq.head(); k != idx; ++k) {
      const SendWqe& x = qp.sq.at(k);
      if (!x.done && is_rd_atomic(x.opcode)) {
        missing = psn_add(x.first_psn, x.read_done);
        earlier = true;
        break;
      }
    }
  }
  if (earlier || psn != expected) {
    // A response went missing.  This one is placed and kept if it can be
    // (read_keep.cpp); the missing ones are asked for again at once rather
    // than after a timeout, and again when the responses start over and
    // they are still missing (one request per pass of responses; more
    // would ask over and over).
    bool kept = false;
    if (read_keepable(nic, r, psn)) {
      if (!scatter(qp.mem(), {qp.sq.sges(idx), w.num_sge}, i * qp.mtu, pkt.payload)) {
        // Failing it completes what is before it: not while an earlier
        // READ/atomic waits for its response (this one fails in order).
        if (!earlier) fail_wqe(nic, qp, idx, WcStatus::loc_prot_err);
        ++nic.counters().req_stale_responses;
        return;
      }
      read_keep(nic, qp, w, psn);
      kept = true;
    }
    if (r.gap == ReadGap::asked && r.gap_psn == missing && !psn_before(psn, r.gap_hi)) {
      if (psn_before(r.gap_hi, psn)) r.gap_hi = psn;
      if (!kept) ++nic.counters().req_stale_responses;
      return;
    }
    transition(qp.qpn(), r.gap, ReadGap::asked);
    r.gap_psn = missing;
    r.gap_hi = psn;
    // Acknowledge what needs no response; for an earlier READ/atomic this
    // asks for it again.
    if (psn_before(r.una_psn, w.first_psn) && ack_through(nic, qp, psn_add(w.first_psn, kPsnMask)) != Acked::all)
      return;
    const HoleAsk ask = kept ? read_request_hole(nic, qp, w, expected) : HoleAsk::no;
    if (ask == HoleAsk::already) return;
    ++nic.counters().req_read_gaps;
    window_on_loss(nic, qp, Loss::read_gap);
    if (ask == HoleAsk::no) go_back(nic, qp, expected);
    return;
  }
  // A READ response acknowledges everything before the READ.
  if (psn_before(r.una_psn, w.first_psn) && ack_through(nic, qp, psn_add(w.first_psn, kPsnMask)) != Acked::all) return;
  if (!scatter(qp.mem(), {qp.sq.sges(idx), w.num_sge}, i * qp.mtu, pkt.payload)) {
    fail_wqe(nic, qp, idx, WcStatus::loc_prot_err);
    return;
  }
  ++w.read_done;
  bool all = false;
  const uint32_t una = read_placed(nic, qp, w, all);
  if (!all && r.kept_count > 0 && psn_before(una, r.kept_hi)) {
    // The next one is missing too, and a response kept after it says it was
    // sent: ask for it now.
    read_request_hole(nic, qp, w, una);
  }
  advance_una(nic, qp, una);
}

// A UROCE_COPY_READ_DONE: the responder placed `n` response packets of a
// READ from `psn` in our memory (requester_copy.cpp).  Taken only as the
// next responses of the READ, with nothing before it missing: otherwise it
// is counted stale and the missing responses are asked for as for packets
// (the gap, or the timer).
void on_copy_read_done(Nic& nic, QpEngine& qp, uint32_t psn, uint32_t n) noexcept {
  RequesterState& r = qp.req;
  uint32_t idx;
  SendWqe* wp = read_at(nic, qp, psn, idx);
  if (!wp) return;
  SendWqe& w = *wp;
  const uint32_t i = uint32_t(psn_diff(psn, w.first_psn));
  if (w.done || i != w.read_done || n > w.read_req - i || read_kept(r, psn)) {
    ++nic.counters().req_stale_responses;
    return;
  }
  for (uint32_t k = qp.sq.head(); k != idx; ++k) {
    const SendWqe& x = qp.sq.at(k);
    if (!x.done && is_rd_atomic(x.opcode)) {  // an earlier response is missing
      ++nic.counters().req_stale_responses;
      return;
    }
  }
  // As a READ response: everything before the READ was executed.
  if (psn_before(r.una_psn, w.first_psn) && ack_through(nic, qp, psn_add(w.first_psn, kPsnMask)) != Acked::all) return;
  w.read_done += n;
  bool all = false;
  advance_una(nic, qp, read_placed(nic, qp, w, all));
}

void on_atomic_ack(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  const uint32_t psn = pkt.hdr.bth.psn;
  uint32_t idx;
  if (!find_wqe(qp, psn, idx) || !is_atomic(qp.sq.at(idx).opcode) || qp.sq.at(idx).done) {
    ++nic.counters().req_stale_responses;
    return;
  }
  SendWqe& w = qp.sq.at(idx);
  if (ack_through(nic, qp, psn_add(psn, kPsnMask)) != Acked::all) return;
  const uint64_t orig = pkt.hdr.atomic_ack.orig;
  uint8_t bytes[8];
  std::memcpy(bytes, &orig, 8);
  if (w.num_sge && !scatter(qp.mem(), {qp.sq.sges(idx), w.num_sge}, 0, {bytes, 8})) {
    fail_wqe(nic, qp, idx, WcStatus::loc_prot_err);
    return;
  }
  w.done = true;
  --qp.req.rd_atomic;
  retire(nic, qp);
  advance_una(nic, qp, psn_add(psn, 1));
}

}  // namespace

void copy_read_done_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  RequesterState& r = qp.req;
  const auto n = wire::parse_copy_done(pkt.payload);
  if (!n) {
    ++nic.counters().rx_malformed;
    return;
  }
  const uint32_t psn = pkt.hdr.bth.psn;
  if (psn_before(psn, r.una_psn) || !psn_before(psn, r.next_psn)) {
    ++nic.counters().req_stale_responses;
    return;
  }
  on_copy_read_done(nic, qp, psn, *n);
  settle_kept(nic, qp);
  if ((r.probing || r.sr_check) && qp.state() != verbs::QpState::err) sr_on_progress(nic, qp, false);
}

void completer_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  RequesterState& r = qp.req;
  const uint32_t psn = pkt.hdr.bth.psn;
  // Only PSNs in [una, next) can be answered; anything else is a stale
  // duplicate (or forged): ignored.  A NAK may name una itself.
  if (psn_before(psn, r.una_psn) || !psn_before(psn, r.next_psn)) {
    ++nic.counters().req_stale_responses;
    return;
  }
  const uint32_t flags = pkt.info->flags;
  if (flags & wire::op::kRead) {
    on_read_response(nic, qp, pkt);
  } else if (flags & wire::op::kAtomic) {
    on_atomic_ack(nic, qp, pkt);
  } else {
    const uint8_t syn = pkt.hdr.aeth.syndrome;
    switch (wire::aeth_type(syn)) {
      case wire::AckType::ack:
        ++nic.counters().req_acks_rcvd;
        ack_through(nic, qp, psn);
        break;
      case wire::AckType::rnr_nak: on_rnr_nak(nic, qp, psn, wire::aeth_value(syn)); break;
      case wire::AckType::nak: on_nak(nic, qp, psn, wire::aeth_value(syn)); break;
      default: ++nic.counters().req_stale_responses; break;
    }
  }
  // una may have reached a READ whose responses are kept (an ACK, an atomic
  // ACK, an earlier READ's last response moved it).
  settle_kept(nic, qp);
  if ((r.probing || r.sr_check) && qp.state() != verbs::QpState::err) sr_on_progress(nic, qp, false);
}

}  // namespace uroce::transport
