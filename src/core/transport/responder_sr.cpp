// Responder, selective repeat: request packets that arrive ahead of the
// expected PSN are kept (reorder.hpp) and executed in order once the
// missing one arrives; a gap that remains behind kept packets is NAKed at
// once, so that the requester resends it without waiting for more traffic.
#include <algorithm>

#include "common/log.hpp"
#include "transport/congestion.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/reorder.hpp"
#include "transport/responder.hpp"
#include "wire/sack.hpp"

namespace uroce::transport {

void responder_keep(Nic& nic, QpEngine& qp, const wire::Packet& pkt, uint32_t ahead) noexcept {
  if (!nic.config().cc.selective_repeat) return;
  if (!qp.reorder) qp.reorder = std::make_unique<ReorderBuffer>();
  switch (qp.reorder->keep(pkt, ahead)) {
    case ReorderBuffer::Keep::kept:
      ++nic.counters().resp_ooo_kept;
      if (qp.resp.sack_peer) {  // after this receive batch (responder_produce)
        qp.resp.sack_due = true;
        nic.schedule(qp);
      }
      break;
    case ReorderBuffer::Keep::duplicate: ++nic.counters().resp_ooo_duplicates; break;
    case ReorderBuffer::Keep::no_room: break;
  }
}

void responder_sack_hello(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  if (!wire::parse_sack_hello(pkt.payload)) {
    ++nic.counters().rx_malformed;
    return;
  }
  const CongestionConfig& cc = nic.config().cc;
  if (!cc.selective_repeat || !cc.sack) return;  // not asked, it sends none
  if (!qp.resp.sack_peer) ++nic.counters().resp_sack_peers;
  qp.resp.sack_peer = true;
}

void responder_emit_sack(Nic& nic, QpEngine& qp) noexcept {
  ResponderState& s = qp.resp;
  s.sack_due = false;
  if (!qp.reorder || qp.reorder->empty()) return;  // the gap was filled meanwhile: the ACK says it
  wire::Headers h;
  h.bth.opcode = uint8_t(wire::Opcode::uroce_sack);
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = s.epsn;
  const auto payload = wire::sack_payload(qp.reorder->held_after(s.epsn));
  if (nic.tx().full()) nic.flush_tx();
  uint8_t* body = nic.tx().scratch();  // (the batch does not copy bodies)
  std::copy(payload.begin(), payload.end(), body);
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {body, payload.size()}, qp_tos(nic, qp));
  ++nic.counters().resp_sacks_sent;
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
  responder_ack(nic, qp, last, Answerable::no);
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
