// Responder, the sending side: READ response packets and atomic ACKs from
// the responder's resources, oldest first, then the coalesced ACK/NAK
// (IBA 9.7.5.1.x).  responder.cpp executes the requests, responder_ack.cpp
// fills the ACK/NAK slot.
#include <algorithm>

#include "transport/congestion.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/responder.hpp"

namespace uroce::transport {

namespace {

// RC's response opcode, or XRC's for an XRC_RECV QP.
uint8_t response_opcode(const QpEngine& qp, wire::Opcode rc) noexcept {
  return uint8_t(uint8_t(rc) | (qp.xrc_recv() ? wire::kXrcOpcodes : 0));
}

// The ACK/NAK the responder's state says (ack_psn, ack_syndrome, MSN).
wire::Headers ack_headers(const QpEngine& qp) noexcept {
  const ResponderState& s = qp.resp;
  wire::Headers h;
  h.bth.opcode = response_opcode(qp, wire::Opcode::rc_ack);
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = s.ack_psn;
  h.aeth.syndrome = s.ack_syndrome;
  h.aeth.msn = s.msn;
  return h;
}

void emit_ack(Nic& nic, QpEngine& qp) noexcept {
  ResponderState& s = qp.resp;
  wire::Headers h = ack_headers(qp);
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));  // headers only
  if (s.ack == AckOwed::ack) ++nic.counters().resp_acks_sent;
  transition(qp.qpn(), s.ack, AckOwed::none);
  s.acks_owed = 0;
}

// One packet of a READ response or an atomic ACK.  False if the resource is
// finished.
bool emit_response(Nic& nic, QpEngine& qp, RdAtomicResource& r) noexcept {
  ResponderState& s = qp.resp;
  wire::Headers h;
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.aeth.syndrome = wire::make_syndrome(wire::AckType::ack, wire::kCreditsInvalid);
  h.aeth.msn = s.msn;
  if (!r.is_read) {
    h.bth.opcode = response_opcode(qp, wire::Opcode::rc_atomic_ack);
    h.bth.psn = r.psn;
    h.atomic_ack.orig = r.orig;
    (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));  // headers only
    return false;
  }
  if (!r.sink.empty()) {  // a one-copy READ: all of it at once
    responder_push_read(nic, qp, r);
    return false;
  }
  const uint32_t len = std::min(qp.mtu, r.resp_left);
  const bool first = r.resp_psn == r.resp_first;
  const bool last = r.resp_left <= qp.mtu;
  using wire::Opcode;
  h.bth.opcode = response_opcode(qp, first && last ? Opcode::rc_read_response_only
                                     : first       ? Opcode::rc_read_response_first
                                     : last        ? Opcode::rc_read_response_last
                                                   : Opcode::rc_read_response_middle);
  h.bth.psn = r.resp_psn;
  std::span<const uint8_t> body;
  if (len) {
    const uint8_t* src = responder_remote_ptr(nic, qp, r.rkey, r.resp_va, len, verbs::access::kRemoteRead);
    if (!src) {  // deregistered while being read
      responder_fail(nic, qp, r.resp_psn, wire::NakCode::remote_access_error);
      return false;
    }
    body = {src, len};
  }
  if (!nic.tx().add(qp.peer, qp.icrc_ip, h, body, qp_tos(nic, qp))) {
    ++nic.counters().resp_memory_faults;  // unmapped or re-protected since registration
    responder_fail(nic, qp, r.resp_psn, wire::NakCode::remote_access_error);
    return false;
  }
  ++nic.counters().resp_read_packets;
  r.resp_psn = psn_add(r.resp_psn, 1);
  r.resp_va += len;
  r.resp_left -= len;
  return !last;
}

}  // namespace

bool responder_owes_plain_ack(const QpEngine& qp) noexcept {
  const ResponderState& s = qp.resp;
  return qp.reliable() && s.ack == AckOwed::ack && s.res_pending == 0 && !s.sack_due;
}

bool responder_produce(Nic& nic, QpEngine& qp, size_t& budget) noexcept {
  ResponderState& s = qp.resp;
  if (!qp.reliable()) return false;
  // Responses leave in PSN order: READ data and atomic ACKs first (oldest
  // resource first), then the coalesced ACK/NAK.
  while (s.res_pending > 0 && budget > 0) {
    RdAtomicResource* next = nullptr;
    for (RdAtomicResource& r : s.res)
      if (r.pending && (!next || psn_before(r.resp_psn, next->resp_psn))) next = &r;
    if (!next) {
      s.res_pending = 0;
      break;
    }
    if (nic.tx().full()) nic.flush_tx();
    --budget;
    if (!emit_response(nic, qp, *next) && next->pending) {  // (a failure flushed them all)
      next->pending = false;
      --s.res_pending;
    }
  }
  if (s.res_pending == 0 && s.ack != AckOwed::none && budget > 0) {
    if (nic.tx().full()) nic.flush_tx();
    --budget;
    emit_ack(nic, qp);
  }
  if (s.sack_due && budget > 0) {  // after the ACK or NAK, which it refines
    --budget;
    responder_emit_sack(nic, qp);
  }
  return s.res_pending > 0 || s.ack != AckOwed::none || s.sack_due;
}

void responder_repeat_final_ack(Nic& nic, QpEngine& qp, int copies) noexcept {
  const ResponderState& s = qp.resp;
  // Only the ACK of everything received, once nothing else is owed: the
  // answer a duplicate of the last request would get.
  if (!qp.reliable() || s.epsn == qp.attr.rq_psn || s.res_pending || s.ack != AckOwed::none) return;
  if (wire::aeth_type(s.ack_syndrome) != wire::AckType::ack || psn_add(s.ack_psn, 1) != s.epsn) return;
  wire::Headers h = ack_headers(qp);
  for (int i = 0; i < copies; ++i) {
    if (nic.tx().full()) nic.flush_tx();
    (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));
    ++nic.counters().resp_final_acks_repeated;
  }
  nic.flush_tx();
}

void responder_flush_ack(Nic& nic, QpEngine& qp) noexcept {
  size_t budget = 1;
  if (qp.resp.ack != AckOwed::none && qp.resp.res_pending == 0) responder_produce(nic, qp, budget);
}

}  // namespace uroce::transport
