#include "transport/qp_engine.hpp"

#include <cstdio>
#include <cstring>

#include "common/log.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/requester.hpp"
#include "transport/responder.hpp"

namespace uroce::transport {

using verbs::WcOpcode;
using verbs::WcStatus;
using verbs::WrOpcode;

QpEngine::QpEngine(Nic& nic, const EngineInit& init) noexcept : nic_(&nic), init_(init) {
  sq.init(init.cap.max_send_wr, init.cap.max_send_sge, init.cap.max_inline_data);
  rq.init(init.cap.max_recv_wr, init.cap.max_recv_sge);
  attr.cap = init.cap;
  attr.qp_state = verbs::QpState::reset;
  attr.port_num = 1;
}

void QpEngine::complete_send(SendWqe& w, WcStatus status) noexcept {
  // A work request completed in error (and the QP with it) gives its
  // memory back to the application: a one-copy request the peer has not
  // carried out yet never will be (copy_gate.hpp).
  if (status != WcStatus::success && req.copy_used) {
    req.copy_used = false;
    nic_->copy_fence();
  }
  verbs::Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  switch (w.opcode) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: wc.opcode = WcOpcode::rdma_write; break;
    case WrOpcode::rdma_read: wc.opcode = WcOpcode::rdma_read; break;
    case WrOpcode::atomic_cmp_and_swp: wc.opcode = WcOpcode::comp_swap; break;
    case WrOpcode::atomic_fetch_and_add: wc.opcode = WcOpcode::fetch_add; break;
    case WrOpcode::bind_mw: wc.opcode = WcOpcode::bind_mw; break;
    case WrOpcode::local_inv: wc.opcode = WcOpcode::local_inv; break;
    default: wc.opcode = WcOpcode::send; break;
  }
  wc.byte_len = verbs::is_atomic_opcode(w.opcode) ? 8 : w.length;
  wc.qp_num = qpn_;
  nic_->deliver(send_cq(), wc, status != WcStatus::success);
}

void QpEngine::set_error_state() noexcept {
  if (attr.qp_state == verbs::QpState::err) return;
  attr.qp_state = verbs::QpState::err;
  transition(qpn_, req.drain, SqDrain::none);
  flush_locked();
}

void QpEngine::fail_keeping_acks() noexcept {
  send_owed_ack();
  set_error_state();
}

void QpEngine::flush_locked() noexcept {
  while (!sq.empty()) {
    SendWqe& w = sq.at(sq.head());
    complete_send(w, w.done ? w.status : WcStatus::wr_flush_err);
    sq.pop();
  }
  req.send_idx = sq.head();
  path_sync(*nic_, *this);  // (nothing in flight in ERR)
  verbs::Wc wc;
  wc.status = WcStatus::wr_flush_err;
  wc.opcode = WcOpcode::recv;
  wc.qp_num = qpn_;
  if (resp.slot == RecvSlot::rq) {  // a SEND being filled, or a WQE held for the next message
    wc.wr_id = resp.recv.wr_id;
    nic_->deliver(recv_cq(), wc, true);
  }
  transition(qpn_, resp.msg, RespMsg::idle);
  transition(qpn_, resp.slot, RecvSlot::empty);
  while (!rq.empty()) {
    wc.wr_id = rq.at(rq.head()).wr_id;
    nic_->deliver(recv_cq(), wc, true);
    rq.pop();
  }
  transition(qpn_, resp.ack, AckOwed::none);
  resp.res_pending = 0;
  for (auto& r : resp.res) r.pending = false;
  if (init_.srq) owner().async_event(verbs::AsyncEventType::qp_last_wqe_reached);
}

void QpEngine::modify(const verbs::QpAttr& a, uint32_t mask, verbs::QpState next, uint32_t port_mtu) noexcept {
  modify_to(a, mask, next, port_mtu);
  nic_->pump_pending();  // (QPs this one's path woke: leaving it, or its charge in ERR)
}

void QpEngine::modify_to(const verbs::QpAttr& a, uint32_t mask, verbs::QpState next, uint32_t port_mtu) noexcept {
  namespace m = verbs::qp_attr_mask;
  using verbs::QpState;
  const QpState cur = attr.qp_state;
  if (mask & m::kQkey) attr.qkey = a.qkey;
  if (mask & m::kAccessFlags) attr.qp_access_flags = a.qp_access_flags;
  if (mask & m::kPathMtu) {
    attr.path_mtu = a.path_mtu;
    mtu = verbs::mtu_bytes(a.path_mtu);
  }
  if (mask & m::kAv) attr.ah_attr = a.ah_attr;
  if (mask & m::kDestQpn) attr.dest_qp_num = a.dest_qp_num;
  if (mask & m::kRqPsn) attr.rq_psn = a.rq_psn & kPsnMask;
  if (mask & m::kSqPsn) attr.sq_psn = a.sq_psn & kPsnMask;
  if (mask & m::kMaxQpRdAtomic) attr.max_rd_atomic = a.max_rd_atomic;
  if (mask & m::kMaxDestRdAtomic) attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & m::kMinRnrTimer) attr.min_rnr_timer = a.min_rnr_timer;
  if (mask & m::kTimeout) attr.timeout = a.timeout;
  if (mask & m::kRetryCnt) attr.retry_cnt = a.retry_cnt;
  if (mask & m::kRnrRetry) attr.rnr_retry = a.rnr_retry;
  if (mask & m::kEnSqdAsyncNotify) attr.en_sqd_async_notify = a.en_sqd_async_notify;

  if (next == cur && next != QpState::rts && next != QpState::sqd) {
    attr.qp_state = next;
    return;
  }
  Nic& nic = *nic_;
  const Endpoint local = nic.local();
  switch (next) {
    case QpState::reset:
      send_owed_ack();
      reset();
      break;
    case QpState::init: break;
    case QpState::rtr:
      if (cur == QpState::init) {
        resp = ResponderState{};
        resp.epsn = attr.rq_psn;
        copy_peer.reset();
        icrc_ip = wire::IpUdpFields{};
        icrc_ip.src = local.addr;
        icrc_ip.src_port = local.port;
        if (type() == verbs::QpType::ud) {
          mtu = port_mtu;
        } else {
          refresh_peer();
        }
      }
      break;
    case QpState::rts:
      if (cur == QpState::rtr) {
        req = RequesterState{};
        req.next_psn = req.una_psn = req.send_psn = req.sent_hwm = req.sack_scan = attr.sq_psn;
        req.send_idx = sq.head();
      }
      req.retry_left = attr.retry_cnt;
      req.rnr_left = attr.rnr_retry;
      transition(qpn_, req.drain, SqDrain::none);  // SQD -> RTS
      attr.qp_state = next;
      nic.schedule(*this);
      nic.pump();
      return;
    case QpState::sqd:
      transition(qpn_, req.drain, SqDrain::draining);
      attr.qp_state = next;
      retire(nic, *this);  // notifies at once if already drained
      return;
    case QpState::err: fail_keeping_acks(); return;
    default: break;
  }
  attr.qp_state = next;
}

verbs::QpAttr QpEngine::query() const noexcept {
  verbs::QpAttr a = attr;
  a.cur_qp_state = a.qp_state;
  a.sq_draining = a.qp_state == verbs::QpState::sqd && req.drain == SqDrain::draining;
  return a;
}

void QpEngine::send_owed_ack() noexcept {
  using verbs::QpState;
  if (!reliable() || resp.res_pending) return;
  if (attr.qp_state != QpState::rtr && attr.qp_state != QpState::rts && attr.qp_state != QpState::sqd) return;
  if (resp.ack != AckOwed::none) {
    if (nic_->tx().full()) nic_->flush_tx();
    nic_->held_ack_leaves(*this, Nic::HeldAck::early);
    responder_flush_ack(*nic_, *this);
    nic_->flush_tx();
  }
  // Nobody answers the peer after this: if that final ACK is lost, its last
  // message would be resent to a QP that is gone until its retries run out.
  // Two more copies make that about as rare as three losses in a row.
  responder_repeat_final_ack(*nic_, *this, kFinalAckRepeats);
}

void QpEngine::reset() noexcept {
  if (req.copy_used) nic_->copy_fence();  // (the send queue's memory goes back: as complete_send)
  sq.clear();
  rq.clear();
  req = RequesterState{};
  resp = ResponderState{};
  dcqcn = Dcqcn{};
  swift = Swift{};
  reorder.reset();
  cnp_sent_at = {};
  nic_->detach_lists(*this);
}

void QpEngine::close() noexcept {
  if (req.copy_used) nic_->copy_fence();  // (as complete_send)
  send_owed_ack();
  nic_->detach(*this);
  nic_->pump_pending();
}

bool QpEngine::post_send(const verbs::SendWr& wr, const verbs::AhAttr* ud_ah, SendPlan plan) noexcept {
  const uint32_t idx = sq.tail();
  SendWqe* wqe = sq.push();
  if (!wqe) return false;  // full (or out of memory to grow into)
  SendWqe& w = *wqe;
  w = SendWqe{};
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.flags = wr.send_flags;
  w.imm = wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.xrc_srqn = wr.remote_srqn & kPsnMask;
  if (wr.opcode == WrOpcode::bind_mw) {
    w.imm = wr.bind.mw_rkey;
    w.remote_addr = wr.bind.addr;
    w.compare_add = wr.bind.length;
    w.swap = uint64_t(wr.bind.mr_lkey) << 32 | wr.bind.access;
  }
  w.signaled = init_.sq_sig_all || (wr.send_flags & verbs::send_flags::kSignaled);
  w.plan = plan;
  w.num_sge = uint16_t(wr.sg_list.size());
  uint32_t len = 0;
  verbs::Sge* sges = sq.sges(idx);
  for (size_t k = 0; k < wr.sg_list.size(); ++k) {
    sges[k] = wr.sg_list[k];
    len += wr.sg_list[k].length;
  }
  w.length = len;
  if ((wr.send_flags & verbs::send_flags::kInline) && !verbs::is_atomic_opcode(wr.opcode) &&
      wr.opcode != WrOpcode::rdma_read && !plan.silent) {
    // Inline: the data is copied now; the lkeys are not looked at (IBA 11.4.1.1).
    uint8_t* dst = sq.inline_data(idx);
    for (const verbs::Sge& s : wr.sg_list) {
      std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
      dst += s.length;
    }
    w.is_inline = true;
  }
  if (ud_ah) {
    w.ud_dst = nic_->resolve(ud_ah->dgid, wr.remote_qpn);
    w.ud_qpn = wr.remote_qpn & kPsnMask;
    w.ud_qkey = wr.remote_qkey;
    w.ud_tclass = ud_ah->traffic_class;
    w.ud_hop_limit = ud_ah->hop_limit;
  }
  if (attr.qp_state == verbs::QpState::err) {
    w.done = true;
    w.status = WcStatus::wr_flush_err;
  }
  return true;
}

void QpEngine::ring_doorbell(size_t posted) noexcept {
  if (attr.qp_state == verbs::QpState::err) {
    retire(*nic_, *this);
  } else if (posted > 0) {
    nic_->schedule(*this);
    // Doorbell batching: an RC QP whose earlier packets are still
    // unacknowledged sends new WRs at the next progress (the application's
    // next poll or wait, or the ACK that arrives), so that WRs posted back to
    // back leave together, in one GSO train.  An idle QP sends at once.
    if (!reliable() || req.una_psn == req.next_psn) {
      nic_->pump();
      nic_->app_posted();  // (only when this post sent: last_tx_ is its own)
    }
  }
}

Status QpEngine::post_recv(std::span<const verbs::RecvWr> wrs, size_t* bad) {
  Status result = post_recv_wrs(rq, wrs, bad, "receive queue", "max_recv_sge");
  if (attr.qp_state == verbs::QpState::err) {
    flush_locked();
    nic_->pump_pending();
  }
  return result;
}

EngineSnapshot QpEngine::snapshot() const noexcept {
  EngineSnapshot e;
  e.state = attr.qp_state;
  e.sq_size = sq.size();
  e.rq_size = rq.size();
  e.una_psn = req.una_psn;
  e.next_psn = req.next_psn;
  e.retry = req.retry;
  e.rnr = req.rnr;
  e.gap = req.gap;
  e.drain = req.drain;
  e.recovery = req.recovery;
  e.epsn = resp.epsn;
  e.msg = resp.msg;
  e.slot = resp.slot;
  e.ack = resp.ack;
  e.seq = resp.seq;
  return e;
}

std::string to_string(const EngineSnapshot& s) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s sq=%u rq=%u una=%u next=%u [retry=%s rnr=%s gap=%s drain=%s recovery=%s] epsn=%u "
                "[msg=%s slot=%s ack=%s seq=%s]",
                verbs::to_string(s.state), s.sq_size, s.rq_size, s.una_psn, s.next_psn, to_string(s.retry),
                to_string(s.rnr), to_string(s.gap), to_string(s.drain), to_string(s.recovery), s.epsn, to_string(s.msg),
                to_string(s.slot), to_string(s.ack), to_string(s.seq));
  return buf;
}

void QpEngine::refresh_peer() noexcept {
  const Endpoint e = nic_->resolve(attr.ah_attr.dgid, attr.dest_qp_num, /*fresh=*/true);
  if (e.port != peer.port && peer.port != 0)
    UROCE_LOG(debug, "qp 0x%x: peer %s now at %s", qpn_, peer.to_string().c_str(), e.to_string().c_str());
  peer = e;
  host_local = nic_->host_local(peer.addr);
  icrc_ip.dst = peer.addr;
  icrc_ip.dst_port = peer.port;
  path_bind(*nic_, *this);
}

}  // namespace uroce::transport
