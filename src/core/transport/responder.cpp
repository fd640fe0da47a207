// Responder: executes RC and UC requests (IBA 9.7.5.1, 9.7.6, 9.9).
//
// In-order packets execute; a future PSN draws one sequence-error NAK per
// gap; a duplicate is answered as the spec says: SEND/WRITE with an ACK, a
// READ by reading again, an atomic from the replay cache (never applied
// twice).  Every remote access is checked (rkey, PD, QP and MR access
// rights, bounds) before a byte moves.  UC: no ACKs or NAKs; a message with a
// PSN gap or an error is dropped whole, later messages still arrive.
#include "transport/responder.hpp"

#include <cstring>

#include "common/fault_guard.hpp"
#include "common/log.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/sge.hpp"

namespace uroce::transport {
namespace {

using verbs::WcStatus;
using wire::NakCode;
namespace op = wire::op;

constexpr uint32_t kMinResources = 16;
// The longest message (IBA: 2^31 bytes); a READ asking for more is invalid.
constexpr uint32_t kMaxMessage = 1u << 31;

// Takes the next receive WQE (SRQ or RQ) into the responder state.
bool take_recv(QpEngine& qp) noexcept {
  ResponderState& s = qp.resp;
  if (RecvSource* srq = qp.srq()) {
    if (!srq->take(s.recv, s.recv_sges)) return false;
    transition(qp.qpn(), s.slot, RecvSlot::srq);
  } else {
    if (qp.rq.empty()) return false;
    const uint32_t h = qp.rq.head();
    s.recv = qp.rq.at(h);
    s.recv_sges.assign(qp.rq.sges(h), qp.rq.sges(h) + s.recv.num_sge);
    qp.rq.pop();
    transition(qp.qpn(), s.slot, RecvSlot::rq);
  }
  s.recv_off = 0;
  return true;
}

// The receive WQE held from a message that was not completed, else the
// next one.  Called with no SEND in progress.
bool acquire_recv(QpEngine& qp) noexcept {
  ResponderState& s = qp.resp;
  if (s.slot != RecvSlot::empty) {
    s.recv_off = 0;
    return true;
  }
  return take_recv(qp);
}

// The receive WQE the responder owns was completed.
void release_recv(QpEngine& qp) noexcept { transition(qp.qpn(), qp.resp.slot, RecvSlot::empty); }

// UC drops a broken message whole and then every packet up to the next
// FIRST/ONLY; a receive WQE it had started to fill stays held for the next
// message (IBA 9.8.3: it is not completed).
void drop_uc_message(QpEngine& qp) noexcept { transition(qp.qpn(), qp.resp.msg, RespMsg::uc_drop); }

void complete_recv(Nic& nic, QpEngine& qp, WcStatus status, verbs::WcOpcode opcode, uint32_t byte_len, uint32_t flags,
                   uint32_t imm, bool solicited) noexcept {
  verbs::Wc wc;
  wc.wr_id = qp.resp.recv.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.imm_data = imm;
  wc.qp_num = qp.qpn();
  wc.src_qp = qp.attr.dest_qp_num;
  wc.wc_flags = flags;
  if (qp.xrc_recv() && !qp.xrc_target) return;  // the SRQ (and its WQE) went away
  nic.deliver(qp.recv_cq(), wc, solicited || status != WcStatus::success);
}

// The request cannot be carried out.  UC drops the message.  RC answers as
// IBA 9.9.3 (class C errors) and rxe do: the receive WQE the message holds
// (a SEND being filled; `wqe_in_use`: the one a WRITE with immediate took)
// completes with the error, the QP enters ERR (flushing every other WQE),
// and the requester gets the NAK.  So a peer that guesses keys, addresses
// or opcodes gets one wrong guess per connection.
void fail_request(Nic& nic, QpEngine& qp, uint32_t psn, NakCode code, WcStatus recv_status,
                  bool wqe_in_use = false) noexcept {
  ResponderState& s = qp.resp;
  if (qp.type() == verbs::QpType::uc) {
    ++nic.counters().uc_dropped_messages;
    drop_uc_message(qp);
    return;
  }
  const bool holds = (wqe_in_use || s.msg == RespMsg::send) && s.slot != RecvSlot::empty;
  transition(qp.qpn(), s.msg, RespMsg::idle);
  if (holds) {
    WcStatus st = recv_status;
    if (st == WcStatus::success)
      st = code == NakCode::remote_access_error ? WcStatus::rem_access_err
           : code == NakCode::invalid_request   ? WcStatus::rem_inv_req_err
                                                : WcStatus::rem_op_err;
    complete_recv(nic, qp, st, verbs::WcOpcode::recv, 0, 0, 0, true);
    release_recv(qp);
  }
  ++nic.counters().resp_qp_errors;
  // The affiliated asynchronous event a NIC raises with the QP's move to
  // ERR: an access violation (a peer's key, or our own receive buffer), an
  // invalid request, or any other failure.
  const bool access = code == NakCode::remote_access_error || recv_status == WcStatus::loc_prot_err;
  qp.owner().async_event(access                             ? verbs::AsyncEventType::qp_access_err
                         : code == NakCode::invalid_request ? verbs::AsyncEventType::qp_req_err
                                                            : verbs::AsyncEventType::qp_fatal);
  qp.set_error_state();  // flushes, which drops any queued ACK: NAK after it
  responder_nak(nic, qp, psn, code);
}

}  // namespace

void responder_fail(Nic& nic, QpEngine& qp, uint32_t psn, NakCode code, bool wqe_in_use) noexcept {
  fail_request(nic, qp, psn, code, WcStatus::success, wqe_in_use);
}

// Remote access check of IBA 9.7.5.1.3 / C9-88: key, PD, QP access, MR
// access, bounds.  Every refusal is counted by its cause.
uint8_t* responder_remote_ptr(Nic& nic, const QpEngine& qp, uint32_t rkey, uint64_t va, uint32_t len,
                              uint32_t need) noexcept {
  Counters& c = nic.counters();
  if ((qp.attr.qp_access_flags & need) != need) {
    ++c.resp_rights_errors;
    return nullptr;
  }
  if (qp.xrc_recv() && !qp.xrc_target) {  // its SRQ, whose PD the access was in, is gone
    ++c.resp_pd_errors;
    return nullptr;
  }
  AccessFault fault = AccessFault::none;
  uint8_t* p = qp.mem().remote(rkey, va, len, need, qp.qpn(), fault);
  switch (fault) {
    case AccessFault::none: break;
    case AccessFault::key: ++c.resp_rkey_errors; break;
    case AccessFault::pd: ++c.resp_pd_errors; break;
    case AccessFault::rights: ++c.resp_rights_errors; break;
    case AccessFault::gone: ++c.resp_unmapped_regions; break;
    case AccessFault::bounds: ++c.resp_bounds_errors; break;
  }
  return p;
}

void responder_write(Nic& nic, QpEngine& qp, const WriteChunk& c, WritePlacer place, const void* ctx) noexcept {
  ResponderState& s = qp.resp;
  const bool rc = qp.reliable();
  // WRITE with immediate consumes a receive WQE: make sure one is there
  // before anything else (an RNR NAK makes the requester send it again);
  // an error in this packet then completes it, as rxe does.
  const bool takes_wqe = c.last && c.imm;
  if (takes_wqe && !acquire_recv(qp)) {
    if (rc) {
      // The requester resends from this packet: a WRITE_ONLY comes back as
      // a FIRST, so the message must not count as begun.
      if (c.first) transition(qp.qpn(), s.msg, RespMsg::idle);
      responder_rnr_nak(nic, qp, c.psn);
    } else {
      ++nic.counters().uc_dropped_messages;
      drop_uc_message(qp);
      s.epsn = psn_add(c.psn, 1);
    }
    return;
  }
  if (c.first) {
    if (c.length && !responder_remote_ptr(nic, qp, c.rkey, c.va, c.length, verbs::access::kRemoteWrite)) {
      fail_request(nic, qp, c.psn, NakCode::remote_access_error, WcStatus::success, takes_wqe);
      return;
    }
    s.write_rkey = c.rkey;
    s.write_va = c.va;
    s.write_left = s.write_total = c.length;
    transition(qp.qpn(), s.msg, RespMsg::write);
  }
  // Every packet but the last is a full MTU; a one-copy request stands for
  // npkts of them.
  if (c.len > s.write_left || (c.last ? c.len != s.write_left : c.len != uint64_t(c.npkts) * qp.mtu)) {
    ++nic.counters().resp_len_errors;
    fail_request(nic, qp, c.psn, NakCode::invalid_request, WcStatus::success, takes_wqe);
    return;
  }
  if (c.len) {
    uint8_t* dst = responder_remote_ptr(nic, qp, s.write_rkey, s.write_va, c.len, verbs::access::kRemoteWrite);
    const WritePlaced placed = dst ? place(nic, qp, dst, c.len, ctx) : WritePlaced::own_fault;
    if (placed == WritePlaced::declined) {  // not carried out: it comes again as packets
      if (c.first) transition(qp.qpn(), s.msg, RespMsg::idle);
      return;
    }
    if (placed == WritePlaced::own_fault) {  // the MR went away in the middle of the message
      fail_request(nic, qp, c.psn, NakCode::remote_access_error, WcStatus::success, takes_wqe);
      return;
    }
    s.write_va += c.len;
    s.write_left -= c.len;
  }
  if (c.last) {
    transition(qp.qpn(), s.msg, RespMsg::idle);
    s.msn = psn_add(s.msn, 1);
    if (c.imm) {
      complete_recv(nic, qp, WcStatus::success, verbs::WcOpcode::recv_rdma_with_imm, s.write_total,
                    verbs::wc_flags::kWithImm, c.imm_data, c.solicited);
      release_recv(qp);
    }
  }
  const uint32_t end = psn_add(c.psn, c.npkts - 1);
  s.epsn = psn_add(end, 1);
  // The ACK of a whole WRITE may wait for the answer too: an application
  // that spins on the memory it lands in answers as soon as it sees it.
  if (rc && c.ack_req)
    responder_ack(nic, qp, end, !c.last ? Answerable::no : c.imm ? Answerable::seen : Answerable::unseen);
}

namespace {

RdAtomicResource& new_resource(ResponderState& s, uint8_t max_dest) noexcept {
  const size_t n = std::max<size_t>(kMinResources, max_dest);
  if (s.res.size() != n) s.res.assign(n, RdAtomicResource{});
  RdAtomicResource& r = s.res[s.res_head];
  if (r.pending) --s.res_pending;  // cannot happen while res_pending < max_dest
  s.res_head = uint32_t((s.res_head + 1) % n);
  r = RdAtomicResource{};
  return r;
}

void on_send(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  if (qp.xrc_remote) {
    responder_send_remote(nic, qp, pkt);
    return;
  }
  ResponderState& s = qp.resp;
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.hdr.bth.psn;
  if (flags & op::kFirst) {
    if (!acquire_recv(qp)) {
      if (qp.reliable()) {
        responder_rnr_nak(nic, qp, psn);
      } else {
        ++nic.counters().uc_dropped_messages;
        drop_uc_message(qp);
        s.epsn = psn_add(psn, 1);
      }
      return;
    }
    transition(qp.qpn(), s.msg, RespMsg::send);
  }
  if (s.recv_off + pkt.payload.size() > s.recv.length) {
    ++nic.counters().resp_len_errors;
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::loc_len_err);
    return;
  }
  if (!scatter(qp.recv_mem(), s.recv_sges, s.recv_off, pkt.payload)) {
    fail_request(nic, qp, psn, NakCode::remote_operational_error, WcStatus::loc_prot_err);
    return;
  }
  s.recv_off += uint32_t(pkt.payload.size());
  if (flags & op::kLast) {
    uint32_t wcf = 0, imm = 0;
    if (flags & op::kImm) {
      wcf = verbs::wc_flags::kWithImm;
      imm = pkt.hdr.imm;
    } else if (flags & op::kIeth) {
      wcf = verbs::wc_flags::kWithInv;
      imm = pkt.hdr.ieth;
    }
    // SEND with invalidate: the IETH names a type 2 window grant to revoke
    // before the receive completes.  One that names none is the requester's
    // error (IBA class J): NAK invalid request, the receive completes
    // REM_INV_REQ_ERR, the QP goes to ERR.  (rxe acknowledges the message
    // first and so leaves its requester unaware.)
    if (flags & op::kIeth) {
      if (!qp.mem().invalidate(pkt.hdr.ieth)) {
        ++nic.counters().resp_invalidate_errors;
        fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::rem_inv_req_err);
        return;
      }
      ++nic.counters().mw_remote_invalidations;
    }
    complete_recv(nic, qp, WcStatus::success, verbs::WcOpcode::recv, s.recv_off, wcf, imm, pkt.hdr.bth.solicited);
    release_recv(qp);
    transition(qp.qpn(), s.msg, RespMsg::idle);
    s.msn = psn_add(s.msn, 1);
  }
  s.epsn = psn_add(psn, 1);
  if (qp.reliable() && pkt.hdr.bth.ack_req)
    responder_ack(nic, qp, psn, (flags & op::kLast) ? Answerable::seen : Answerable::no);
}

// A WRITE packet's payload, placed by fault_guard::copy.
WritePlaced place_payload(Nic& nic, QpEngine&, uint8_t* dst, uint32_t len, const void* ctx) noexcept {
  const auto* payload = static_cast<const std::span<const uint8_t>*>(ctx);
  if (fault_guard::copy(dst, payload->data(), len, dst)) return WritePlaced::done;
  ++nic.counters().resp_memory_faults;  // unmapped or re-protected since
  return WritePlaced::own_fault;
}

void on_write(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  const uint32_t flags = pkt.info->flags;
  WriteChunk c;
  c.psn = pkt.hdr.bth.psn;
  c.first = flags & op::kFirst;
  c.last = flags & op::kLast;
  c.imm = flags & op::kImm;
  c.solicited = pkt.hdr.bth.solicited;
  c.ack_req = pkt.hdr.bth.ack_req;
  c.imm_data = pkt.hdr.imm;
  c.va = pkt.hdr.reth.va;
  c.rkey = pkt.hdr.reth.rkey;
  c.length = pkt.hdr.reth.length;
  c.len = uint32_t(pkt.payload.size());
  c.npkts = 1;
  responder_write(nic, qp, c, place_payload, &pkt.payload);
}

// More READs/atomics outstanding than max_dest_rd_atomic allows (the
// requester's max_rd_atomic must not exceed it).
bool resources_full(Nic& nic, const QpEngine& qp) noexcept {
  if (qp.resp.res_pending < std::max<uint32_t>(1, qp.attr.max_dest_rd_atomic)) return false;
  ++nic.counters().resp_rd_atomic_limit;
  return true;
}

}  // namespace

void responder_read(Nic& nic, QpEngine& qp, uint32_t psn, const wire::Reth& reth, std::vector<wire::CopyRange>&& sink,
                    uint32_t sink_gate) noexcept {
  ResponderState& s = qp.resp;
  if (reth.length > kMaxMessage) {  // more PSNs than half the sequence space
    ++nic.counters().resp_len_errors;
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    return;
  }
  if (reth.length && !responder_remote_ptr(nic, qp, reth.rkey, reth.va, reth.length, verbs::access::kRemoteRead)) {
    fail_request(nic, qp, psn, NakCode::remote_access_error, WcStatus::success);
    return;
  }
  if (resources_full(nic, qp)) {
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    return;
  }
  RdAtomicResource& r = new_resource(s, qp.attr.max_dest_rd_atomic);
  r.is_read = true;
  r.psn = psn;
  r.npkts = reth.length == 0 ? 1 : uint32_t((uint64_t(reth.length) + qp.mtu - 1) / qp.mtu);
  r.rkey = reth.rkey;
  r.va = reth.va;
  r.length = reth.length;
  r.pending = true;
  r.resp_first = r.resp_psn = psn;
  r.resp_va = reth.va;
  r.resp_left = reth.length;
  r.sink = std::move(sink);
  r.sink_gate = sink_gate;
  ++s.res_pending;
  s.epsn = psn_add(psn, r.npkts);
  s.msn = psn_add(s.msn, 1);
  nic.schedule(qp);
}

bool responder_reread(Nic& nic, QpEngine& qp, uint32_t psn, const wire::Reth& reth,
                      std::vector<wire::CopyRange>&& sink) noexcept {
  ResponderState& s = qp.resp;
  for (RdAtomicResource& r : s.res) {
    const int32_t d = psn_diff(psn, r.psn);
    if (!r.is_read || d < 0 || uint32_t(d) >= r.npkts) continue;
    // Read again: the request may ask for the tail only (a retry after a
    // gap), and run on into later requests of the same READ, but never
    // past the PSNs requested so far (it would take PSNs not yet ours).
    const uint64_t npkts = reth.length == 0 ? 1 : (uint64_t(reth.length) + qp.mtu - 1) / qp.mtu;
    if (reth.length > kMaxMessage || npkts > uint64_t(-psn_diff(psn, s.epsn))) {
      ++nic.counters().resp_len_errors;
      return true;
    }
    if (reth.length && !responder_remote_ptr(nic, qp, reth.rkey, reth.va, reth.length, verbs::access::kRemoteRead)) {
      fail_request(nic, qp, psn, NakCode::remote_access_error, WcStatus::success);
      return true;
    }
    ++nic.counters().resp_dup_reads;
    if (r.pending && !r.sink.empty() && psn == r.resp_first && reth.va == r.resp_va && reth.length == r.resp_left)
      return true;  // the same again while its one-copy push is still to come: that push answers it
    if (!r.pending) ++s.res_pending;
    r.pending = true;
    r.rkey = reth.rkey;
    r.resp_first = r.resp_psn = psn;
    r.resp_va = reth.va;
    r.resp_left = reth.length;
    r.sink = std::move(sink);
    nic.schedule(qp);
    return true;
  }
  return false;
}

namespace {

void on_read(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  responder_read(nic, qp, pkt.hdr.bth.psn, pkt.hdr.reth, {}, 0);
}

void on_atomic(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  ResponderState& s = qp.resp;
  const wire::AtomicEth& a = pkt.hdr.atomic;
  const uint32_t psn = pkt.hdr.bth.psn;
  if (a.va % 8 != 0) {
    ++nic.counters().resp_misaligned_atomics;
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    return;
  }
  uint8_t* p = responder_remote_ptr(nic, qp, a.rkey, a.va, 8, verbs::access::kRemoteAtomic);
  if (p && reinterpret_cast<uintptr_t>(p) % 8 != 0) {  // iova and address disagree mod 8
    ++nic.counters().resp_misaligned_atomics;
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    return;
  }
  if (!p) {
    fail_request(nic, qp, psn, NakCode::remote_access_error, WcStatus::success);
    return;
  }
  if (resources_full(nic, qp)) {
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    return;
  }
  auto* word = reinterpret_cast<uint64_t*>(p);
  uint64_t orig = 0;
  const bool cas = (pkt.hdr.bth.opcode & wire::kOperationMask) == uint8_t(wire::Opcode::rc_compare_swap);
  // The memory may have gone (unmapped, re-protected) since it was
  // registered: the guard turns the fault into an access error.
  if (!fault_guard::run(p, 8, [&] {
        if (cas) {
          orig = a.compare;
          __atomic_compare_exchange_n(word, &orig, a.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        } else {
          orig = __atomic_fetch_add(word, a.swap_add, __ATOMIC_SEQ_CST);
        }
      })) {
    ++nic.counters().resp_memory_faults;
    fail_request(nic, qp, psn, NakCode::remote_access_error, WcStatus::success);
    return;
  }
  RdAtomicResource& r = new_resource(s, qp.attr.max_dest_rd_atomic);
  r.is_read = false;
  r.psn = psn;
  r.npkts = 1;
  r.orig = orig;
  r.resp_psn = psn;
  r.pending = true;
  ++s.res_pending;
  s.epsn = psn_add(psn, 1);
  s.msn = psn_add(s.msn, 1);
  nic.schedule(qp);
}

// IBA 9.7.5.1.2: a request with a PSN already executed.
void on_duplicate(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  ResponderState& s = qp.resp;
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.hdr.bth.psn;
  ++nic.counters().resp_duplicates;
  if (flags & (op::kSend | op::kWrite)) {
    // Its ACK was lost: acknowledge everything received so far.
    if (pkt.hdr.bth.ack_req) responder_ack(nic, qp, psn_add(s.epsn, kPsnMask), Answerable::no);
    return;
  }
  if ((flags & op::kRead) && responder_reread(nic, qp, psn, pkt.hdr.reth, {})) return;
  for (RdAtomicResource& r : s.res) {
    const int32_t d = psn_diff(psn, r.psn);
    if (d < 0 || uint32_t(d) >= r.npkts) continue;
    if ((flags & op::kAtomic) && !r.is_read && d == 0) {
      ++nic.counters().resp_dup_atomics;  // answered from the cache, not applied again
      if (!r.pending) ++s.res_pending;
      r.pending = true;
      nic.schedule(qp);
    } else {
      ++nic.counters().resp_dup_unmatched;
    }
    return;
  }
  // Older than every remembered READ/atomic (or never one): nothing to answer.
  ++nic.counters().resp_dup_unmatched;
}

}  // namespace

bool responder_starts_message(uint32_t flags) noexcept {
  return (flags & op::kFirst) || (flags & (op::kRead | op::kAtomic));
}

void responder_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  ResponderState& s = qp.resp;
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.hdr.bth.psn;
  if (qp.xrc_recv() && !responder_xrc_target(nic, qp, pkt)) return;  // responder_xrc.cpp
  if (qp.reliable()) {
    const int32_t d = psn_diff(psn, s.epsn);
    if (d > 0) {  // a gap: ask for the missing PSN, keep this packet (selective repeat)
      ++nic.counters().resp_future_psn;
      responder_keep(nic, qp, pkt, uint32_t(d));
      if (s.seq == SeqNak::clear) {
        responder_nak(nic, qp, s.epsn, NakCode::psn_sequence_error);
        s.nak_hi = psn;
      } else if (pkt.hdr.bth.ack_req && psn_before(psn, s.nak_hi)) {
        // Below the highest PSN seen since our NAK, and asking for an ACK:
        // the requester went back and sends this stretch again, yet the
        // expected PSN is still missing.  Our NAK, or the packet resent, was
        // lost: ask again, about once per pass (asking only once would leave
        // every further loss of the same packet to the retransmission timer
        // and its retry count).  Packets merely reordered rarely ask for an
        // ACK, so they rarely draw a NAK of their own.
        ++nic.counters().resp_seq_naks_repeated;
        responder_nak(nic, qp, s.epsn, NakCode::psn_sequence_error);
        s.nak_hi = psn;
      } else if (psn_before(s.nak_hi, psn)) {
        s.nak_hi = psn;
      }
      return;
    }
    if (d < 0) {
      on_duplicate(nic, qp, pkt);
      return;
    }
    transition(qp.qpn(), s.seq, SeqNak::clear);
  } else {  // UC: resynchronise on a gap, dropping the broken message
    if (psn != s.epsn) {
      // A message in progress is lost, and so is one whose first packet
      // went missing (its tail is about to be discarded).
      if (s.msg == RespMsg::send || s.msg == RespMsg::write || (s.msg == RespMsg::idle && !(flags & op::kFirst)))
        ++nic.counters().uc_dropped_messages;
      drop_uc_message(qp);
    }
    if (s.msg == RespMsg::uc_drop) {
      if (!(flags & op::kFirst)) {
        s.epsn = psn_add(psn, 1);
        return;
      }
      transition(qp.qpn(), s.msg, RespMsg::idle);
    }
  }
  // Opcode sequence: a message in progress continues.
  bool cont_ok = false;
  switch (s.msg) {
    case RespMsg::send: cont_ok = (flags & op::kSend) && !(flags & op::kFirst); break;
    case RespMsg::write: cont_ok = (flags & op::kWrite) && !(flags & op::kFirst); break;
    case RespMsg::idle:
    case RespMsg::uc_drop: cont_ok = responder_starts_message(flags); break;
  }
  if (!cont_ok) {
    ++nic.counters().resp_opcode_seq_errors;
    fail_request(nic, qp, psn, NakCode::invalid_request, WcStatus::success);
    if (qp.type() == verbs::QpType::uc) s.epsn = psn_add(psn, 1);
    return;
  }
  if (flags & op::kSend)
    on_send(nic, qp, pkt);
  else if (flags & op::kWrite)
    on_write(nic, qp, pkt);
  else if (flags & op::kRead)
    on_read(nic, qp, pkt);
  else if (flags & op::kAtomic)
    on_atomic(nic, qp, pkt);
}

}  // namespace uroce::transport
