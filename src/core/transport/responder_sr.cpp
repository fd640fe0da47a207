// Responder, selective repeat: request packets that arrive ahead of the
// expected PSN are kept (reorder.hpp) and executed in order once the
// missing one arrives; a gap that remains behind kept packets is NAKed at
// once, so that the requester resends it without waiting for more traffic.
#include "common/log.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/reorder.hpp"
#include "transport/responder.hpp"

namespace uroce::transport {

void responder_keep(Nic& nic, QpEngine& qp, const wire::Packet& pkt, uint32_t ahead) noexcept {
  if (!nic.config().cc.selective_repeat) return;
  if (!qp.reorder) qp.reorder = std::make_unique<ReorderBuffer>();
  switch (qp.reorder->keep(pkt, ahead)) {
    case ReorderBuffer::Keep::kept: ++nic.counters().resp_ooo_kept; break;
    case ReorderBuffer::Keep::duplicate: ++nic.counters().resp_ooo_duplicates; break;
    case ReorderBuffer::Keep::no_room: break;
  }
}

namespace {

// Kept packets ran.  An ACK owed covers them too; a
// pending (unsent) sequence NAK whose gap they filled becomes an ACK of
// everything received, sparing the requester a resend.  (Without kept
// packets the NAK stays: it is what tells a go-back-N requester that
// everything after the gap was dropped.)
void responder_after_kept(Nic& nic, QpEngine& qp) noexcept {
  ResponderState& s = qp.resp;
  const uint32_t last = psn_add(s.epsn, kPsnMask);
  if (s.ack == AckOwed::ack && psn_before(s.ack_psn, last)) s.ack_psn = last;
  if (s.ack != AckOwed::seq_nak || !psn_before(s.ack_psn, s.epsn)) return;
  transition(qp.qpn(), s.ack, AckOwed::none);
  --nic.counters().resp_seq_naks_sent;  // counted when queued; never sent
  responder_ack(nic, qp, last, false);
}

}  // namespace

void responder_drain(Nic& nic, QpEngine& qp) noexcept {
  ReorderBuffer* rb = qp.reorder.get();
  if (!rb || rb->empty()) return;
  ResponderState& s = qp.resp;
  wire::Packet pkt;
  std::vector<uint8_t> payload;
  bool executed = false;
  while (rb->take(s.epsn, pkt, payload)) {
    const verbs::QpState st = qp.state();
    if (st == verbs::QpState::reset || st == verbs::QpState::init || st == verbs::QpState::err) break;
    const uint32_t before = s.epsn;
    ++nic.counters().resp_ooo_executed;
    responder_receive(nic, qp, pkt);
    if (s.epsn == before) break;  // NAKed (RNR, an error): the requester sends it again
    executed = true;
  }
  if (executed) responder_after_kept(nic, qp);
  if (!rb->empty() && !psn_before(s.epsn, rb->highest())) rb->clear();  // all stale: passed without taking
  if (!rb->empty() && s.seq == SeqNak::clear && s.ack != AckOwed::nak) {
    // Packets kept beyond a PSN still missing: ask for it now.
    responder_nak(nic, qp, s.epsn, wire::NakCode::psn_sequence_error);
    s.nak_hi = rb->highest();
  }
}

}  // namespace uroce::transport
