// Requester: turns send WQEs into request packets (IBA 9.7.1 - 9.7.4).
//
// PSNs are assigned per message when its WQE is first started; a message of
// n packets (a READ: n response packets) takes n PSNs.  Transmission is
// limited by the window of unacknowledged packets; READs are requested in
// segments of at most a window so the responses never flood the receiver.
// Going back (retransmission) replays the same PSNs from the WQE that holds
// the oldest unacknowledged one.
#include "transport/requester.hpp"

#include "common/log.hpp"
#include "transport/congestion.hpp"
#include "transport/protocol.hpp"
#include "transport/sge.hpp"
#include "wire/opcode.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {
namespace {

using verbs::WrOpcode;
using wire::Opcode;

// Bytes a packet takes on the wire beyond its payload, for pacing: IPv4,
// UDP, BTH, the largest extension header (RETH or AtomicETH) and the ICRC.
constexpr uint32_t kPacketOverhead = 20 + 8 + 12 + 28 + 4;

uint32_t packets_for(uint32_t len, uint32_t mtu) noexcept { return len == 0 ? 1 : (len + mtu - 1) / mtu; }

// RC/UC opcode of a SEND or WRITE packet by its position in the message.
uint8_t data_opcode(bool uc, WrOpcode op, bool first, bool last) noexcept {
  const uint8_t base = uc ? 0x20 : 0x00;
  const bool write = op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_with_imm;
  const bool imm = op == WrOpcode::rdma_write_with_imm || op == WrOpcode::send_with_imm;
  const bool inv = op == WrOpcode::send_with_inv;
  uint8_t o;
  if (write) {
    if (first && last)
      o = imm ? 0x0b : 0x0a;
    else if (first)
      o = 0x06;
    else if (last)
      o = imm ? 0x09 : 0x08;
    else
      o = 0x07;
  } else {
    if (first && last)
      o = inv ? 0x17 : imm ? 0x05 : 0x04;
    else if (first)
      o = 0x00;
    else if (last)
      o = inv ? 0x16 : imm ? 0x03 : 0x02;
    else
      o = 0x01;
  }
  return uint8_t(base | o);
}

// `opcode` is RC's (or UC's); an XRC_SEND QP sends the XRC opcode of the
// same operation (RC's | 0xa0) with the XRCETH naming the WR's SRQ.
wire::Headers base_headers(const QpEngine& qp, const SendWqe& w, uint8_t opcode, uint32_t psn) noexcept {
  wire::Headers h;
  h.bth.opcode = opcode;
  if (qp.type() == verbs::QpType::xrc_send) {
    h.bth.opcode = uint8_t(opcode | wire::kXrcOpcodes);
    h.xrc_srqn = w.xrc_srqn;
  }
  h.bth.pkey = wire::kDefaultPkey;
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = psn;
  return h;
}

void ensure_room(Nic& nic) noexcept {
  if (nic.tx().full()) nic.flush_tx();
}

// First transmission of a WQE: checks and PSN assignment.  False if it must
// wait (fence, rd/atomic limit) or failed (QP now in ERR).
bool start_wqe(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx) noexcept {
  RequesterState& r = qp.req;
  const bool rc = qp.reliable();
  if (rc && (w.flags & verbs::send_flags::kFence) && r.rd_atomic > 0) return false;
  if (is_rd_atomic(w.opcode) && r.rd_atomic >= std::max<uint32_t>(1, qp.attr.max_rd_atomic)) return false;
  if (w.plan.fail != verbs::WcStatus::success) {
    fail_wqe(nic, qp, idx, w.plan.fail);
    return false;
  }
  // The local keys of a SEND or WRITE are checked before its data leaves;
  // those of a READ or an atomic only when the response lands (completer),
  // as on a NIC: the remote side's errors come first, and an atomic with a
  // good rkey executes at the peer even if its local buffer is bad.
  if (!w.is_inline && !w.plan.silent && !is_rd_atomic(w.opcode) &&
      !check_sges(qp.mem(), {qp.sq.sges(idx), w.num_sge}, 0)) {
    fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);
    return false;
  }
  w.first_psn = r.next_psn;
  w.npkts = is_atomic(w.opcode) || qp.type() == verbs::QpType::ud ? 1 : packets_for(w.length, qp.mtu);
  w.read_done = w.read_req = 0;
  w.assigned = true;
  r.next_psn = psn_add(r.next_psn, w.npkts);
  r.send_pkt = 0;
  r.send_psn = w.first_psn;
  if (is_rd_atomic(w.opcode)) ++r.rd_atomic;
  return true;
}

bool is_local_op(WrOpcode op) noexcept { return op == WrOpcode::bind_mw || op == WrOpcode::local_inv; }

// BIND_MW and LOCAL_INV: no packet, executed when the requester reaches
// them (after everything posted before has been sent), completed in order
// with the WQEs around them.  A bind that breaks a rule completes
// MW_BIND_ERR, an invalidation of a grant that is not a bound type 2
// window's LOC_QP_OP_ERR; either moves the QP to ERR.  False if it must
// wait (fence) or failed.
bool run_local_op(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx) noexcept {
  RequesterState& r = qp.req;
  if ((w.flags & verbs::send_flags::kFence) && r.rd_atomic > 0) return false;
  if (w.plan.fail != verbs::WcStatus::success) {
    fail_wqe(nic, qp, idx, w.plan.fail);
    return false;
  }
  Counters& c = nic.counters();
  verbs::WcStatus st;
  if (w.opcode == WrOpcode::bind_mw) {
    WindowBind b;
    b.mw_key = w.imm;
    b.new_rkey = w.rkey;
    b.mr_lkey = uint32_t(w.swap >> 32);
    b.addr = w.remote_addr;
    b.length = w.compare_add;
    b.access = uint32_t(w.swap);
    st = qp.mem().bind_window(b, qp.qpn());
    ++(st == verbs::WcStatus::success ? c.mw_binds : c.mw_bind_errors);
  } else {
    st = qp.mem().invalidate(w.imm) ? verbs::WcStatus::success : verbs::WcStatus::loc_qp_op_err;
    if (st == verbs::WcStatus::success) ++c.mw_local_invalidations;
  }
  if (st != verbs::WcStatus::success) {
    fail_wqe(nic, qp, idx, st);
    return false;
  }
  w.first_psn = r.next_psn;
  w.npkts = 0;
  w.assigned = true;
  w.done = true;
  retire(nic, qp);  // completes now if nothing before it is outstanding
  return true;
}

// `psn` went again.  The packet being timed, resent itself, gives no
// sample (Karn: its ACK may be the first sending's).  If `psn` is before
// it and was resent for a NAK (a later packet arrived without it: lost),
// the ACK that covers the timed packet comes only once this resend
// arrived: it is timed from now (when the last hole before it is filled, so
// the latest resend counts).  Resent by the watch instead, `psn` may only
// be late, its first sending then answered before this one: no sample.  A
// packet timed before `psn` is unaffected.  Under steady loss nearly every
// timed packet has a hole before it: cancelling them all left a QP without
// a round trip for seconds, its losses all taken for random ones.
void retime_for_resend(RequesterState& r, uint32_t psn) noexcept {
  if (!r.timing || psn_before(r.timed_psn, psn)) return;
  if (psn == r.timed_psn || !r.nak_resends) {
    r.timing = false;
    return;
  }
  r.timed_at = Clock::now();
  r.reanchored = true;
}

// `timeable`: the response to this packet comes at once (it asks for an
// ACK and completes no receive; a READ of one response packet; an atomic),
// so the time to it is a round trip.
// (A packet without AckReq waits at the responder for the next one that
// asks: at a slow bottleneck share that gap would be taken for queueing.)
void count_packet(Nic& nic, QpEngine& qp, uint32_t psn, bool timeable, uint32_t npsn = 1) noexcept {
  ++nic.counters().req_packets;
  if (qp.type() == verbs::QpType::xrc_send) ++nic.counters().xrc_tx_requests;
  RequesterState& r = qp.req;
  r.tail_unasked = false;  // (but emit_data's packets that do not ask)
  if (psn_before(psn, r.sent_hwm)) {
    ++nic.counters().req_retransmits;
    retime_for_resend(r, psn);
    // (A one-copy request resent may run on past what was ever sent.)
    if (psn_before(r.sent_hwm, psn_add(psn, npsn))) r.sent_hwm = psn_add(psn, npsn);
  } else {
    // Sent for the first time: in the train of the packet before it?  (A
    // READ's response PSNs and an atomic's count as trains of their own.)
    r.train_first[psn % kTrainPsns] = nic.tx().train() != r.last_train;
    for (uint32_t k = 1; k < npsn; ++k) r.train_first[psn_add(psn, k) % kTrainPsns] = true;
    r.last_train = nic.tx().train();
    r.sent_hwm = psn_add(psn, npsn);
    if (!r.timing && timeable && qp.reliable()) {  // time this one (selective.cpp)
      r.timing = true;
      r.reanchored = false;
      r.timed_psn = psn_add(psn, npsn - 1);
      // The system clock, not the NIC's: a pump that sends a window reads
      // that once, before its first packet, and congestion control would
      // take the time to its last for queueing.
      r.timed_at = Clock::now();
    }
  }
}

// Emits a UROCE_COPY_WRITE for the next `k` packets of an RC WRITE
// (requester_copy.cpp): counted, paced and acknowledged as those packets.
// Returns false when the message is finished.
bool emit_copy(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx, uint32_t k) noexcept {
  RequesterState& r = qp.req;
  const uint32_t off = r.send_pkt * qp.mtu;
  const uint32_t bytes = std::min(k * qp.mtu, w.length - off);
  const bool last = r.send_pkt + k == w.npkts;
  uint8_t* body = nic.tx().scratch();  // (the batch does not copy bodies)
  const size_t n = build_copy_request(nic, qp, w, idx, k, {body, TxBatch::kBounce});
  if (n == 0) {
    fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);  // deregistered since it was posted
    return false;
  }
  wire::Headers h = base_headers(qp, w, uint8_t(Opcode::uroce_copy_write), r.send_psn);
  h.bth.solicited = last && (w.flags & verbs::send_flags::kSolicited);
  h.bth.ack_req = true;
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {body, n}, qp_tos(nic, qp));  // (reads no application memory)
  w.copied = true;
  ++nic.counters().req_copy_writes;
  nic.counters().req_copy_bytes += bytes;
  count_packet(nic, qp, r.send_psn, !(last && w.opcode == WrOpcode::rdma_write_with_imm), k);
  pace_sent(nic, qp, bytes + k * kPacketOverhead);
  r.send_psn = psn_add(r.send_psn, k);
  r.send_pkt += k;
  return !last;
}

// Emits the next packet of a SEND/WRITE (RC or UC), or a one-copy request
// for the next packets of a large WRITE to a same-host peer (unless
// `packets_only`).  Returns false when the message is finished.
bool emit_data(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx, bool packets_only = false) noexcept {
  RequesterState& r = qp.req;
  if (!packets_only)
    if (const uint32_t k = copy_chunk_packets(nic, qp, w); k > 0) return emit_copy(nic, qp, w, idx, k);
  const uint32_t mtu = qp.mtu;
  const uint32_t off = r.send_pkt * mtu;
  const uint32_t len = std::min(mtu, w.length - off);
  const bool first = r.send_pkt == 0;
  const bool last = r.send_pkt + 1 == w.npkts;
  const bool uc = qp.type() == verbs::QpType::uc;
  wire::Headers h = base_headers(qp, w, data_opcode(uc, w.opcode, first, last), r.send_psn);
  h.bth.solicited = last && (w.flags & verbs::send_flags::kSolicited);
  uint32_t ack_every = std::max<uint32_t>(1, window_pkts(qp) / 2);
  // A paced QP sends slowly: it asks for an ACK at least every quarter of its
  // retransmission interval, or the timer would fire between two ACKs.
  if (qp.dcqcn.limited()) ack_every = std::min(ack_every, paced_ack_every(nic, qp));
  h.bth.ack_req = !uc && (last || (r.send_pkt + 1) % ack_every == 0 || r.force_ack);
  if (first && (w.opcode == WrOpcode::rdma_write || w.opcode == WrOpcode::rdma_write_with_imm)) {
    h.reth.va = w.remote_addr;
    h.reth.rkey = w.rkey;
    h.reth.length = w.length;
  }
  h.imm = w.imm;
  h.ieth = w.imm;
  std::span<const uint8_t> body;
  if (w.is_inline) {
    body = {qp.sq.inline_data(idx) + off, len};
  } else {
    bool ok;
    body = gather(qp.mem(), {qp.sq.sges(idx), w.num_sge}, off, len, nic.tx().scratch(), ok);
    if (!ok) {
      fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);
      return false;
    }
  }
  if (!nic.tx().add(qp.peer, qp.icrc_ip, h, body, qp_tos(nic, qp))) {
    fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);  // the memory went away since registration
    return false;
  }
  // The last packet of a message that consumes a receive is ACKed lazily
  // (with the reply, or within a tick): not a round trip.
  const bool consumes = w.opcode != WrOpcode::rdma_write;
  count_packet(nic, qp, r.send_psn, h.bth.ack_req && !(last && consumes));
  r.tail_unasked = !h.bth.ack_req;
  r.force_ack = false;  // (path_allows: for one packet)
  pace_sent(nic, qp, len + kPacketOverhead);
  r.send_psn = psn_add(r.send_psn, 1);
  ++r.send_pkt;
  return !last;
}

// A READ request for response packets [i, i + n) of `w` (at `idx`), or its
// one-copy request (requester_copy.cpp) for a large READ from a same-host
// peer; `idx` ~0u: a packet.
void send_read_request(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t i, uint32_t n, uint32_t idx = ~0u) noexcept {
  const uint32_t psn = psn_add(w.first_psn, i);
  const uint64_t off = uint64_t(i) * qp.mtu;
  // Asked for again (a loss, going back): as a packet, whose responses the
  // completer drops once the READ has them.  A second push could land
  // after the READ completed and its memory went back to the application.
  if (idx != ~0u && !psn_before(psn, qp.req.sent_hwm)) {
    uint8_t* body = nic.tx().scratch();  // (the batch does not copy bodies)
    if (const size_t len = build_copy_read_request(nic, qp, w, idx, i, n, {body, TxBatch::kBounce}); len > 0) {
      wire::Headers h = base_headers(qp, w, uint8_t(Opcode::uroce_copy_read), psn);
      h.bth.ack_req = true;
      (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {body, len}, qp_tos(nic, qp));  // (reads no application memory)
      qp.sq.at(idx).copied = true;
      ++nic.counters().req_copy_reads;
      nic.counters().req_copy_read_bytes += std::min<uint64_t>(uint64_t(n) * qp.mtu, w.length - off);
      count_packet(nic, qp, psn, false, n);  // (its answer comes after the copy: no round trip)
      pace_sent(nic, qp, kPacketOverhead);
      return;
    }
  }
  wire::Headers h = base_headers(qp, w, uint8_t(Opcode::rc_read_request), psn);
  h.bth.ack_req = true;
  h.reth.va = w.remote_addr + off;
  h.reth.rkey = w.rkey;
  h.reth.length = uint32_t(std::min<uint64_t>(uint64_t(n) * qp.mtu, w.length - off));
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));  // headers only
  count_packet(nic, qp, psn, n == 1, n);
  pace_sent(nic, qp, kPacketOverhead);
}

// READ requests go out in segments of max_window_pkts() response packets,
// aligned at multiples of it from the READ's first packet; the next segment
// is asked for once the responses outstanding fall to half the send window.
bool read_segment_due(const QpEngine& qp, const SendWqe& w) noexcept {
  return w.read_req - w.read_done <= window_pkts(qp) / 2;
}

// Emits the next READ request segment.  Returns true if the WQE still has
// segments to request (it then holds the send queue: PSNs are in order).
bool emit_read(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx) noexcept {
  RequesterState& r = qp.req;
  // A re-request (after a gap or a timeout) asks from the first missing
  // response to the end of its aligned segment, never across: it then lies
  // within one earlier request, which the responder either executed (it
  // answers the duplicate) or never got (the re-request then starts at its
  // expected PSN).  One that ran into a later segment the responder never
  // got would ask for PSNs it does not know yet: it drops such requests.
  const uint32_t seg = max_window_pkts(qp);
  const uint32_t n = std::min(w.npkts, (w.read_req / seg + 1) * seg) - w.read_req;
  send_read_request(nic, qp, w, w.read_req, n, idx);
  w.read_req += n;
  r.send_psn = psn_add(w.first_psn, w.read_req);
  return w.read_req < w.npkts;
}

// Asks for the READ responses missing at asked_psn (read_keep.cpp), if they
// still are.
void emit_read_hole(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  const uint32_t n = r.hole_pkts;
  r.hole_pkts = 0;
  uint32_t idx;
  if (psn_before(r.asked_psn, r.una_psn) || !find_wqe(qp, r.asked_psn, idx)) return;
  SendWqe& w = qp.sq.at(idx);
  const uint32_t i = uint32_t(psn_diff(r.asked_psn, w.first_psn));
  if (!is_read(w.opcode) || w.done || i < w.read_done || i >= w.read_req) return;
  send_read_request(nic, qp, w, i, std::min(n, w.read_req - i));
}

void emit_atomic(Nic& nic, QpEngine& qp, SendWqe& w) noexcept {
  const bool cas = w.opcode == WrOpcode::atomic_cmp_and_swp;
  wire::Headers h = base_headers(qp, w, uint8_t(cas ? Opcode::rc_compare_swap : Opcode::rc_fetch_add), w.first_psn);
  h.bth.ack_req = true;
  h.atomic.va = w.remote_addr;
  h.atomic.rkey = w.rkey;
  h.atomic.swap_add = cas ? w.swap : w.compare_add;
  h.atomic.compare = cas ? w.compare_add : 0;
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));  // headers only
  count_packet(nic, qp, w.first_psn, true);
  pace_sent(nic, qp, kPacketOverhead);
  qp.req.send_psn = psn_add(w.first_psn, 1);
}

void emit_ud(Nic& nic, QpEngine& qp, SendWqe& w, uint32_t idx) noexcept {
  if (w.plan.silent) {  // above the MTU: no packet, no error (IBA C10-93.1.1)
    ++nic.counters().ud_oversize_sends;
    return;
  }
  const bool imm = w.opcode == WrOpcode::send_with_imm;
  wire::Headers h;
  h.bth.opcode = uint8_t(imm ? Opcode::ud_send_only_imm : Opcode::ud_send_only);
  h.bth.pkey = wire::kDefaultPkey;
  h.bth.solicited = w.flags & verbs::send_flags::kSolicited;
  h.bth.dest_qp = w.ud_qpn;
  h.bth.psn = w.first_psn;
  h.deth.qkey = (w.ud_qkey & 0x80000000u) ? qp.attr.qkey : w.ud_qkey;
  h.deth.src_qp = qp.qpn();
  h.imm = w.imm;
  if (w.ud_dst.addr.is_multicast()) ++nic.counters().mcast_tx_packets;
  std::span<const uint8_t> body;
  if (w.is_inline) {
    body = {qp.sq.inline_data(idx), w.length};
  } else {
    bool ok;
    body = gather(qp.mem(), {qp.sq.sges(idx), w.num_sge}, 0, w.length, nic.tx().scratch(), ok);
    if (!ok) {
      fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);
      return;
    }
  }
  wire::IpUdpFields ip = qp.icrc_ip;
  ip.dst = w.ud_dst.addr;
  ip.dst_port = w.ud_dst.port;
  if (!nic.tx().add(w.ud_dst, ip, h, body, w.ud_tclass)) {
    fail_wqe(nic, qp, idx, verbs::WcStatus::loc_prot_err);  // the memory went away since registration
    return;
  }
  ++nic.counters().req_packets;
}

// Resends the packet resend_psn (selective.cpp: a run of resend_left
// packets from it, the last asking for an ACK), then carries on where
// transmission was.  False if the QP failed.
bool resend_one(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  const uint32_t psn = r.resend_psn;
  --r.resend_left;
  r.resend_psn = psn_add(psn, 1);
  if (psn_before(psn, r.una_psn)) return true;  // acknowledged meanwhile
  // The peer holds it (a SACK said): not again -- but una, when the watch
  // resends it: its ACK was lost, and a duplicate draws it again.
  if (sack_held(r, psn) && (r.nak_resends || psn != r.una_psn)) return true;
  uint32_t idx;
  if (!psn_before(psn, r.sent_hwm) || !find_wqe(qp, psn, idx) || qp.sq.at(idx).done ||
      is_rd_atomic(qp.sq.at(idx).opcode)) {
    r.resend_left = 0;
    return true;
  }
  SendWqe& w = qp.sq.at(idx);
  const uint32_t send_idx = r.send_idx, send_pkt = r.send_pkt, send_psn = r.send_psn;
  r.send_idx = idx;
  r.send_pkt = uint32_t(psn_diff(psn, w.first_psn));
  r.send_psn = psn;
  r.force_ack = r.resend_left == 0 || !psn_before(r.resend_psn, r.sent_hwm);
  ensure_room(nic);
  emit_data(nic, qp, w, idx, true);  // one packet, as asked
  r.force_ack = false;
  if (qp.state() == verbs::QpState::err) return false;
  r.send_idx = send_idx;
  r.send_pkt = send_pkt;
  r.send_psn = send_psn;
  sack_note_resent(nic, r, psn);
  ++nic.counters().req_selective_resends;
  return true;
}

}  // namespace

NextRequest requester_next(const QpEngine& qp) noexcept {
  const RequesterState& r = qp.req;
  const verbs::QpState st = qp.state();
  if ((st != verbs::QpState::rts && st != verbs::QpState::sqd) || (r.rnr == RnrGate::waiting && r.hole_pkts == 0))
    return NextRequest::none;
  if (r.hole_pkts > 0 || r.resend_left > 0 || r.sack_hello_due) return NextRequest::visible;
  if (r.send_idx == qp.sq.tail()) return NextRequest::none;
  return qp.sq.at(r.send_idx).opcode == verbs::WrOpcode::rdma_write ? NextRequest::silent : NextRequest::visible;
}

bool requester_produce(Nic& nic, QpEngine& qp, size_t& budget) noexcept {
  RequesterState& r = qp.req;
  const verbs::QpType type = qp.type();
  const bool rc = qp.reliable();
  bool sent = false;
  bool more = false;
  while (true) {
    const verbs::QpState st = qp.state();
    if (st != verbs::QpState::rts && st != verbs::QpState::sqd) break;
    // Waiting out an RNR NAK; a READ hole before its PSN may still be asked for.
    if (r.rnr == RnrGate::waiting && r.hole_pkts == 0) break;
    // Missing READ responses (read_keep.cpp) and lost packets (selective.cpp),
    // before anything new.
    if (rc && r.sack_hello_due) sack_emit_hello(nic, qp);
    if (r.resend_left == 0 && r.hole_pkts == 0 && rc) sack_next_hole(nic, qp);
    if (r.hole_pkts > 0 || r.resend_left > 0) {
      if (budget == 0) {
        more = true;
        break;
      }
      if (!pace_allows(nic, qp)) break;
      --budget;
      sent = true;
      if (r.hole_pkts > 0) {
        ensure_room(nic);
        emit_read_hole(nic, qp);
      } else if (!resend_one(nic, qp)) {
        break;
      }
      continue;
    }
    if (r.send_idx == qp.sq.tail()) break;
    if (budget == 0) {
      more = true;
      break;
    }
    const uint32_t idx = r.send_idx;
    SendWqe& w = qp.sq.at(idx);
    if (is_local_op(w.opcode)) {
      if (!w.assigned && (st == verbs::QpState::sqd || !run_local_op(nic, qp, w, idx))) break;
      ++r.send_idx;  // (also when a rewind passes over it: it ran once)
      continue;
    }
    if (!w.assigned) {
      if (st == verbs::QpState::sqd) break;  // draining: no new messages
      if (!start_wqe(nic, qp, w, idx)) break;
    }
    // The window: packets neither acknowledged nor held by the peer (SACKs),
    // and never more PSNs after una than the peer can keep.
    if (rc && (in_flight(r) >= window_pkts(qp) || psn_diff(r.send_psn, r.una_psn) >= int32_t(max_window_pkts(qp))))
      break;
    if (is_read(w.opcode) && !read_segment_due(qp, w)) break;       // wait for responses
    if (type != verbs::QpType::ud && !pace_allows(nic, qp)) break;  // the rate the network allows (DCQCN)
    // The QPs sending to this peer together (path_share.hpp), asked last:
    // a QP whose turn came sends in it, not stopped by its own pace.
    if (rc && !path_allows(nic, qp, psn_before(r.send_psn, r.sent_hwm))) break;
    ensure_room(nic);
    --budget;
    sent = true;
    if (type == verbs::QpType::ud) {
      emit_ud(nic, qp, w, idx);
      if (qp.state() == verbs::QpState::err) break;
      w.done = true;
      ++r.send_idx;
      retire(nic, qp);
      continue;
    }
    if (is_read(w.opcode)) {
      if (!emit_read(nic, qp, w, idx)) ++r.send_idx;
      continue;
    }
    if (is_atomic(w.opcode)) {
      emit_atomic(nic, qp, w);
      ++r.send_idx;
      continue;
    }
    if (!emit_data(nic, qp, w, idx)) {
      if (qp.state() == verbs::QpState::err) break;
      ++r.send_idx;
      r.send_pkt = 0;
      if (!rc) {  // UC: complete once sent
        w.done = true;
        retire(nic, qp);
      }
    }
  }
  if (sent && rc) {
    requester_arm_retransmit(nic, qp);
    sr_on_sent(nic, qp);
  }
  if (rc) path_sync(nic, qp, /*turn_over=*/true);
  return more;
}

}  // namespace uroce::transport
