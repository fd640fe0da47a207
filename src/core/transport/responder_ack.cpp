// Responder, the ACK/NAK it owes: one coalesced slot per QP, sent by
// responder_tx.cpp when Nic::pump gets to the QP (IBA 9.7.5.1.x).  Whether
// an ACK may wait for the application's answer is decided here; when it
// leaves, in nic_tx.cpp.
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/qp_engine.hpp"
#include "transport/responder.hpp"

namespace uroce::transport {

using wire::NakCode;

// The coalesced response slot holds one ACK or NAK.  A pending NAK is never
// replaced by an ACK (the NAK acknowledges everything before its PSN as
// well), and a pending RNR or error NAK is not replaced by anything: the
// sequence NAKs that packets behind it draw would hide it from the requester
// (an error would turn into a retry, an RNR wait into a tight resend loop).
void responder_ack(Nic& nic, QpEngine& qp, uint32_t psn, Answerable what) noexcept {
  ResponderState& s = qp.resp;
  if (s.ack == AckOwed::seq_nak || s.ack == AckOwed::nak) return;
  transition(qp.qpn(), s.ack, AckOwed::ack);
  s.ack_psn = psn;
  s.ack_syndrome = wire::make_syndrome(wire::AckType::ack, wire::kCreditsInvalid);
  // An ACK for one message the application may answer (a receive it
  // completed, a WRITE it may spin on) waits for that answer (a ping-pong's
  // reply: both in one sendmmsg, see Nic::pump for their order), or for an
  // idle poll (progress.cpp).  Any other ACK, or one for more packets (a
  // stream: the sender's window would stall), leaves with this receive
  // batch.
  const bool lazy = ++s.acks_owed < 2 && what != Answerable::no;
  s.ack_after_answer = s.ack_may_wait = false;
  // What came may be the peer's answer to a request of ours only if that
  // left long enough ago to have reached the peer: half the least round
  // trip measured (none yet: it may).  A peer's WRITE that crossed ours on
  // the way (both sides write, then wait for their completion) is no
  // answer, and its ACK must not wait for ours, which the peer holds the
  // same way.  (The least round trip includes a wake-up or two of the
  // responder's thread, which an application that answers itself saves:
  // the whole of it was too much.)  No lazy ACK waits while the last ones
  // held that way left alone (ResponderState::hold_skip).
  //
  // A WRITE without immediate data is answered by an application that
  // spins on memory for it, so the progress thread landed it; one that
  // polls its CQ (it received the WRITE) saw nothing, and its next poll
  // would send the ACK a while later (after a sched_yield, say): that ACK
  // leaves now, unless held for our own (above).
  const RequesterState& r = qp.req;
  const bool skip = lazy && s.hold_skip > 0;
  if (skip) --s.hold_skip;
  s.ack_after_answer = lazy && !skip && r.una_psn != r.next_psn && r.timing &&
                       nic.now() - r.timed_at >= std::chrono::nanoseconds(r.min_rtt_ns / 2);
  s.ack_may_wait = s.ack_after_answer || (lazy && !skip && (what == Answerable::seen || !nic.app_receives()));
  s.ack_for_poller = s.ack_may_wait && nic.app_polls();
  if (s.ack_may_wait)
    nic.schedule_ack(qp);
  else
    nic.schedule(qp);
}

namespace {

void queue_nak(Nic& nic, QpEngine& qp, uint32_t psn, wire::AckType type, uint8_t value) noexcept {
  ResponderState& s = qp.resp;
  if (s.ack == AckOwed::nak) return;
  const bool seq = type == wire::AckType::nak && NakCode(value) == NakCode::psn_sequence_error;
  transition(qp.qpn(), s.ack, seq ? AckOwed::seq_nak : AckOwed::nak);
  s.ack_psn = psn;
  s.ack_syndrome = wire::make_syndrome(type, value);
  // The requester resends from `psn` after any NAK: packets behind it that
  // arrive meanwhile are dropped without a sequence NAK of their own.
  transition(qp.qpn(), s.seq, SeqNak::sent);
  s.nak_hi = psn;
  Counters& c = nic.counters();
  if (type == wire::AckType::rnr_nak)
    ++c.resp_rnr_naks_sent;
  else
    switch (NakCode(value)) {
      case NakCode::psn_sequence_error: ++c.resp_seq_naks_sent; break;
      case NakCode::remote_access_error: ++c.resp_access_naks_sent; break;
      case NakCode::invalid_request: ++c.resp_inv_req_naks_sent; break;
      default: ++c.resp_op_err_naks_sent; break;
    }
  nic.schedule(qp);  // NAKs are never delayed
}

}  // namespace

void responder_nak(Nic& nic, QpEngine& qp, uint32_t psn, NakCode code) noexcept {
  queue_nak(nic, qp, psn, wire::AckType::nak, uint8_t(code));
}

void responder_rnr_nak(Nic& nic, QpEngine& qp, uint32_t psn) noexcept {
  queue_nak(nic, qp, psn, wire::AckType::rnr_nak, qp.attr.min_rnr_timer);
}

}  // namespace uroce::transport
