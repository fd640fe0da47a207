// The responder's XRC part (IBA 9.9.4): which XRC SRQ a request to an
// XRC_RECV QP is for, and the hand-over of a SEND to an SRQ of another
// process (xrc_share.hpp).  NIC lock held.
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/responder.hpp"
#include "transport/xrc_share.hpp"

namespace uroce::transport {

namespace op = wire::op;
using verbs::WcStatus;
using wire::NakCode;

// XRC_RECV: the SRQ (hence CQ and PD) this request is for, as its XRCETH
// names it.  False when the request was refused (NAKed, QP to ERR).
bool responder_xrc_target(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  ResponderState& s = qp.resp;
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.hdr.bth.psn;
  ++nic.counters().xrc_rx_requests;
  const uint32_t srqn = pkt.hdr.xrc_srqn;
  // While a message is in progress its SRQ stays the target: the WQE held
  // is that SRQ's, and so is the CQ where it completes.  The next packet
  // must name it (a continuation, or a new message that the responder's
  // opcode check refuses); an older or later packet naming another SRQ (a
  // duplicate, to be acknowledged; one past a gap, to be NAKed) is handled
  // without moving the target.
  const bool next = psn == s.epsn;
  const bool other = s.msg != RespMsg::idle && srqn != qp.xrc_msg_srqn;
  if (other && next) {
    ++nic.counters().resp_xrc_srq_errors;
    responder_fail(nic, qp, psn, NakCode::invalid_request);
    return false;
  }
  RecvSource* target = nic.find_xrc_srq(srqn);
  // Another process's, in the domain we share with it: SENDs only.
  XrcRemote* remote = target ? nullptr : nic.find_remote_xrc_srq(srqn, qp.xrcd_file());
  const bool refused =
      target ? target->xrc_domain() != qp.xrcd() : !remote || !(flags & op::kSend) || (flags & op::kIeth);
  if (refused) {
    ++nic.counters().resp_xrc_srq_errors;
    responder_fail(nic, qp, psn, NakCode::invalid_request);
    return false;
  }
  if (!other) {
    qp.xrc_target = target;
    qp.xrc_remote = remote;
  }
  if (next && responder_starts_message(flags)) qp.xrc_msg_srqn = srqn;
  return true;
}

// A SEND for another process's XRC SRQ (xrc_share.hpp): a credit at the
// first packet (none: RNR NAK), each packet's payload into its inbox; the
// owner takes the WQE, scatters and completes.  A full inbox drops a packet
// as if lost (the requester sends it again), and a first packet with an RNR
// NAK, which spends none of its retries.
void responder_send_remote(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  ResponderState& s = qp.resp;
  XrcRemote& r = *qp.xrc_remote;
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.hdr.bth.psn;
  const bool first = flags & op::kFirst, last = flags & op::kLast;
  if (first) {
    switch (r.take_credit()) {
      case XrcRemote::Take::ok: break;
      case XrcRemote::Take::empty: responder_rnr_nak(nic, qp, psn); return;
      case XrcRemote::Take::gone:
        ++nic.counters().resp_xrc_srq_errors;
        responder_fail(nic, qp, psn, NakCode::invalid_request);
        return;
    }
    s.recv_off = 0;
  }
  xrc_share::Piece p{};
  p.tgt_qpn = qp.qpn();
  p.msn = s.msn;
  p.src_qp = qp.attr.dest_qp_num;
  p.offset = s.recv_off;
  p.flags = (first ? xrc_share::kFirst : 0) | (last ? xrc_share::kLast : 0) |
            ((flags & op::kImm) ? xrc_share::kImm : 0) | (pkt.hdr.bth.solicited ? xrc_share::kSolicited : 0);
  p.imm = (flags & op::kImm) ? pkt.hdr.imm : 0;
  p.len = uint32_t(pkt.payload.size());
  switch (r.put(p, pkt.payload)) {
    case net::ShmRing::Put::ok: break;
    case net::ShmRing::Put::too_big:  // cannot happen with our MTUs; never retried
      if (first) r.give_back();
      ++nic.counters().resp_len_errors;
      responder_fail(nic, qp, psn, NakCode::invalid_request);
      return;
    default:  // full, or lost to a stall: as if the packet were lost
      ++nic.counters().xrc_handoff_full;
      if (first) {  // ask again later, as for a receive queue not ready (spends no retry)
        r.give_back();
        responder_rnr_nak(nic, qp, psn);
      }
      return;
  }
  if (first) transition(qp.qpn(), s.msg, RespMsg::send);
  s.recv_off += p.len;
  if (last) {
    ++nic.counters().xrc_handoff_sent;
    transition(qp.qpn(), s.msg, RespMsg::idle);
    s.msn = psn_add(s.msn, 1);
  }
  s.epsn = psn_add(psn, 1);
  // Not lazy: the receive completes in the other process, no answer of ours
  // will carry this ACK.
  if (pkt.hdr.bth.ack_req) responder_ack(nic, qp, psn, Answerable::no);
}

}  // namespace uroce::transport
