#include "verbs/qp.hpp"

#include <cstring>

#include "common/log.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/requester.hpp"
#include "verbs/ah.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp_state_table.hpp"
#include "verbs/srq.hpp"

namespace uroce::verbs {

namespace m = qp_attr_mask;
using transport::SendWqe;

Qp::Qp(Pd& pd, const QpInitAttr& init) : pd_(&pd), nic_(&pd.context().nic()), init_(init) {}

Result<std::unique_ptr<Qp>> Qp::create(Pd& pd, const QpInitAttr& in) {
  QpInitAttr init = in;
  if (init.qp_type == QpType::xrc_send || init.qp_type == QpType::xrc_recv)
    return err::notsup("XRC QPs are not supported yet");
  if (init.qp_type != QpType::rc && init.qp_type != QpType::uc && init.qp_type != QpType::ud)
    return err::inval("qp_type " + std::to_string(int(init.qp_type)) + " is not RC, UC or UD");
  if (!init.send_cq || !init.recv_cq) return err::inval("a QP needs a send CQ and a receive CQ");
  if (&init.send_cq->context() != &pd.context() || &init.recv_cq->context() != &pd.context())
    return err::inval("CQs belong to another device context than the PD");
  if (init.srq && &init.srq->pd().context() != &pd.context())
    return err::inval("SRQ belongs to another device context");
  QpCap& cap = init.cap;
  if (cap.max_send_wr > kMaxWr || (!init.srq && cap.max_recv_wr > kMaxWr))
    return err::inval("max_send_wr/max_recv_wr above " + std::to_string(kMaxWr));
  if (cap.max_send_sge > kMaxSge || (!init.srq && cap.max_recv_sge > kMaxSge))
    return err::inval("max_send_sge/max_recv_sge above " + std::to_string(kMaxSge));
  if (cap.max_inline_data > kMaxInline) return err::inval("max_inline_data above " + std::to_string(kMaxInline));
  if (init.srq) cap.max_recv_wr = cap.max_recv_sge = 0;
  // Report what we really provide: at least one SGE, and inline room for
  // small messages even when none was asked for (it costs us nothing).
  cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  if (!init.srq) cap.max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
  cap.max_inline_data = std::max<uint32_t>(cap.max_inline_data, 64);

  std::unique_ptr<Qp> qp(new Qp(pd, init));
  qp->sq_.init(cap.max_send_wr, cap.max_send_sge, cap.max_inline_data);
  qp->rq_.init(cap.max_recv_wr, cap.max_recv_sge);
  qp->attr_.cap = cap;
  qp->attr_.qp_state = QpState::reset;
  qp->attr_.port_num = 1;
  UROCE_TRY(qp->nic_->attach(*qp, qp->qpn_));
  pd.users()++;
  init.send_cq->users()++;
  init.recv_cq->users()++;
  if (init.srq) init.srq->users()++;
  qp->nic_->start_progress_thread();
  return qp;
}

Qp::~Qp() {
  {
    std::lock_guard g(nic_->mu());
    send_owed_ack_locked();
    nic_->detach(*this);
  }
  pd_->context().forget_async_events(this);
  pd_->users()--;
  init_.send_cq->users()--;
  init_.recv_cq->users()--;
  if (init_.srq) init_.srq->users()--;
}

QpAttr Qp::query() const {
  std::lock_guard g(nic_->mu());
  QpAttr a = attr_;
  a.cur_qp_state = a.qp_state;
  a.sq_draining = a.qp_state == QpState::sqd && !req_.drained_notified;
  return a;
}

Status Qp::modify(const QpAttr& attr, uint32_t mask) {
  std::lock_guard g(nic_->mu());
  Status s = modify_locked(attr, mask);
  if (!s.ok()) UROCE_LOG(debug, "modify_qp 0x%x: %s", qpn_, s.to_string().c_str());
  return s;
}

Status Qp::modify_locked(const QpAttr& a, uint32_t mask) {
  const QpState cur = attr_.qp_state;
  if ((mask & m::kCurState) && a.cur_qp_state != cur)
    return err::inval(std::string("cur_qp_state says ") + to_string(a.cur_qp_state) + " but the QP is in " +
                      to_string(cur));
  const QpState next = (mask & m::kState) ? a.qp_state : cur;
  UROCE_TRY(check_qp_transition(type(), cur, next, mask));
  const Context& ctx = pd_->context();
  // Validate every attribute before changing anything.
  if ((mask & m::kPkeyIndex) && a.pkey_index != 0) return err::inval("pkey_index must be 0 (one P_Key)");
  if ((mask & m::kPort) && a.port_num != 1) return err::inval("port_num must be 1");
  // qp_access_flags: bits other than the QP's rights (ON_DEMAND, ZERO_BASED,
  // ...) are kept and grant nothing, as the kernel and rxe pass them through
  // (rdma-core's tests set ON_DEMAND on the QPs of ODP regions).
  uint32_t mtu = mtu_;
  if (mask & m::kPathMtu) {
    if (uint8_t(a.path_mtu) < 1 || uint8_t(a.path_mtu) > 5) return err::inval("path_mtu must be 1..5 (256..4096)");
    mtu = mtu_bytes(a.path_mtu);
    if (mtu > ctx.port_attr().active_mtu_bytes)
      return err::inval("path_mtu " + std::to_string(mtu) + " exceeds the port's active MTU " +
                        std::to_string(ctx.port_attr().active_mtu_bytes));
  }
  if (mask & m::kAv) {
    if (!a.ah_attr.is_global) return err::inval("RoCE needs a global route: set ah_attr.is_global and the peer's GID");
    if (a.ah_attr.sgid_index >= ctx.config().gids.size())
      return err::inval("sgid_index " + std::to_string(a.ah_attr.sgid_index) + " is not in the GID table");
    if (a.ah_attr.dgid.is_v4() != ctx.config().gids[a.ah_attr.sgid_index].is_v4())
      return err::inval("destination GID " + a.ah_attr.dgid.to_string() + " is not of the source GID's IP version");
  }
  if ((mask & m::kMaxQpRdAtomic) && a.max_rd_atomic > kMaxRdAtomic)
    return err::inval("max_rd_atomic above " + std::to_string(kMaxRdAtomic));
  if ((mask & m::kMaxDestRdAtomic) && a.max_dest_rd_atomic > kMaxRdAtomic)
    return err::inval("max_dest_rd_atomic above " + std::to_string(kMaxRdAtomic));
  if ((mask & m::kMinRnrTimer) && a.min_rnr_timer > 31) return err::inval("min_rnr_timer above 31");
  if ((mask & m::kTimeout) && a.timeout > 31) return err::inval("timeout above 31");
  if ((mask & m::kRetryCnt) && a.retry_cnt > 7) return err::inval("retry_cnt above 7");
  if ((mask & m::kRnrRetry) && a.rnr_retry > 7) return err::inval("rnr_retry above 7");
  if ((mask & m::kDestQpn) && a.dest_qp_num > transport::kPsnMask) return err::inval("dest_qp_num above 2^24");

  // Apply.
  if (mask & m::kQkey) attr_.qkey = a.qkey;
  if (mask & m::kAccessFlags) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & m::kPathMtu) {
    attr_.path_mtu = a.path_mtu;
    mtu_ = mtu;
  }
  if (mask & m::kAv) attr_.ah_attr = a.ah_attr;
  if (mask & m::kDestQpn) attr_.dest_qp_num = a.dest_qp_num;
  if (mask & m::kRqPsn) attr_.rq_psn = a.rq_psn & transport::kPsnMask;
  if (mask & m::kSqPsn) attr_.sq_psn = a.sq_psn & transport::kPsnMask;
  if (mask & m::kMaxQpRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & m::kMaxDestRdAtomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & m::kMinRnrTimer) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & m::kTimeout) attr_.timeout = a.timeout;
  if (mask & m::kRetryCnt) attr_.retry_cnt = a.retry_cnt;
  if (mask & m::kRnrRetry) attr_.rnr_retry = a.rnr_retry;
  if (mask & m::kEnSqdAsyncNotify) attr_.en_sqd_async_notify = a.en_sqd_async_notify;

  if (next == cur && next != QpState::rts && next != QpState::sqd) {
    attr_.qp_state = next;
    return {};
  }
  transport::Nic& nic = *nic_;
  const Endpoint local = nic.local();
  switch (next) {
    case QpState::reset:
      send_owed_ack_locked();
      reset_locked();
      break;
    case QpState::init: break;
    case QpState::rtr:
      if (cur == QpState::init) {
        resp_ = transport::ResponderState{};
        resp_.epsn = attr_.rq_psn;
        icrc_ip_ = wire::IpUdpFields{};
        icrc_ip_.src = local.addr;
        icrc_ip_.src_port = local.port;
        if (type() == QpType::ud) {
          mtu_ = ctx.port_attr().active_mtu_bytes;
        } else {
          peer_ = nic.resolve(attr_.ah_attr.dgid, attr_.dest_qp_num, /*fresh=*/true);
          icrc_ip_.dst = peer_.addr;
          icrc_ip_.dst_port = peer_.port;
        }
      }
      break;
    case QpState::rts:
      if (cur == QpState::rtr) {
        req_ = transport::RequesterState{};
        req_.next_psn = req_.una_psn = req_.send_psn = req_.sent_hwm = attr_.sq_psn;
        req_.send_idx = sq_.head();
      }
      req_.retry_left = attr_.retry_cnt;
      req_.rnr_left = attr_.rnr_retry;
      attr_.qp_state = next;
      nic.schedule(*this);
      nic.pump();
      return {};
    case QpState::sqd:
      req_.drained_notified = false;
      attr_.qp_state = next;
      transport::retire(nic, *this);  // notifies at once if already drained
      return {};
    case QpState::err:
      send_owed_ack_locked();
      set_error_state();
      return {};
    default: break;
  }
  attr_.qp_state = next;
  return {};
}

void Qp::send_owed_ack_locked() noexcept {
  if (type() != QpType::rc || !resp_.ack_pending || resp_.res_pending) return;
  if (attr_.qp_state != QpState::rtr && attr_.qp_state != QpState::rts && attr_.qp_state != QpState::sqd) return;
  if (nic_->tx().full()) nic_->flush_tx();
  transport::responder_flush_ack(*nic_, *this);
  nic_->flush_tx();
}

void Qp::reset_locked() noexcept {
  sq_.clear();
  rq_.clear();
  // What the QP completed and nobody polled goes with it.
  if (init_.send_cq) init_.send_cq->discard_qp_locked(qpn_);
  if (init_.recv_cq && init_.recv_cq != init_.send_cq) init_.recv_cq->discard_qp_locked(qpn_);
  req_ = transport::RequesterState{};
  resp_ = transport::ResponderState{};
  nic_->detach_lists(*this);
}

void Qp::complete_send_locked(SendWqe& w, WcStatus status) noexcept {
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  switch (w.opcode) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: wc.opcode = WcOpcode::rdma_write; break;
    case WrOpcode::rdma_read: wc.opcode = WcOpcode::rdma_read; break;
    case WrOpcode::atomic_cmp_and_swp: wc.opcode = WcOpcode::comp_swap; break;
    case WrOpcode::atomic_fetch_and_add: wc.opcode = WcOpcode::fetch_add; break;
    default: wc.opcode = WcOpcode::send; break;
  }
  wc.byte_len = is_atomic_opcode(w.opcode) ? 8 : w.length;
  wc.qp_num = qpn_;
  init_.send_cq->push(wc, status != WcStatus::success);
}

void Qp::set_error_state() noexcept {
  if (attr_.qp_state == QpState::err) return;
  attr_.qp_state = QpState::err;
  flush_locked();
}

void Qp::flush_locked() noexcept {
  while (!sq_.empty()) {
    SendWqe& w = sq_.at(sq_.head());
    complete_send_locked(w, w.done ? w.status : WcStatus::wr_flush_err);
    sq_.pop();
  }
  req_.send_idx = sq_.head();
  Wc wc;
  wc.status = WcStatus::wr_flush_err;
  wc.opcode = WcOpcode::recv;
  wc.qp_num = qpn_;
  if ((resp_.in_send || resp_.recv_held) && !resp_.recv_from_srq) {
    wc.wr_id = resp_.recv.wr_id;
    init_.recv_cq->push(wc, true);
  }
  resp_.in_send = resp_.in_write = resp_.recv_held = false;
  while (!rq_.empty()) {
    wc.wr_id = rq_.at(rq_.head()).wr_id;
    init_.recv_cq->push(wc, true);
    rq_.pop();
  }
  resp_.ack_pending = false;
  resp_.res_pending = 0;
  for (auto& r : resp_.res) r.pending = false;
  if (init_.srq) pd_->context().post_async_event({AsyncEventType::qp_last_wqe_reached, this});
}

Status Qp::validate_send(const SendWr& wr) const {
  const QpType t = type();
  switch (wr.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm: break;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
      if (t == QpType::ud) return err::inval("RDMA WRITE on a UD QP");
      break;
    case WrOpcode::rdma_read:
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::send_with_inv:
      if (t != QpType::rc) return err::inval("READ, atomics and SEND_WITH_INV need an RC QP");
      break;
    default: return err::inval("opcode " + std::to_string(int(wr.opcode)) + " is not supported");
  }
  if (wr.sg_list.size() > attr_.cap.max_send_sge)
    return err::inval("num_sge " + std::to_string(wr.sg_list.size()) + " above max_send_sge " +
                      std::to_string(attr_.cap.max_send_sge));
  uint64_t len = 0;
  for (const Sge& s : wr.sg_list) len += s.length;
  if (len > (1ull << 31)) return err::inval("message longer than 2 GiB");
  if ((wr.send_flags & send_flags::kInline) && len > attr_.cap.max_inline_data)
    return err::inval("inline message of " + std::to_string(len) + " bytes above max_inline_data " +
                      std::to_string(attr_.cap.max_inline_data));
  if (is_atomic_opcode(wr.opcode) && len != 8 && !wr.sg_list.empty())
    return err::inval("an atomic's local buffer must be 8 bytes");
  if (t == QpType::ud) {
    if (!wr.ah) return err::inval("UD send without an address handle");
    if (&wr.ah->pd() != pd_) return err::inval("the address handle belongs to another PD");
    if (len > pd_->context().port_attr().active_mtu_bytes)
      return err::inval("UD message of " + std::to_string(len) + " bytes above the MTU");
  }
  return {};
}

Status Qp::post_send(std::span<const SendWr> wrs, size_t* bad) {
  std::lock_guard g(nic_->mu());
  const QpState st = attr_.qp_state;
  if (st == QpState::reset || st == QpState::init || st == QpState::rtr) {
    if (bad) *bad = 0;
    return err::inval(std::string("post_send on a QP in ") + to_string(st));
  }
  Status result;
  size_t i = 0;
  for (; i < wrs.size(); ++i) {
    const SendWr& wr = wrs[i];
    if (Status s = validate_send(wr); !s.ok()) {
      result = s;
      break;
    }
    if (sq_.full()) {
      result = err::nomem("send queue full (" + std::to_string(sq_.max_wr()) + " WRs)");
      break;
    }
    const uint32_t idx = sq_.tail();
    SendWqe& w = sq_.push();
    w = SendWqe{};
    w.wr_id = wr.wr_id;
    w.opcode = wr.opcode;
    w.flags = wr.send_flags;
    w.imm = wr.imm_data;
    w.remote_addr = wr.remote_addr;
    w.rkey = wr.rkey;
    w.compare_add = wr.compare_add;
    w.swap = wr.swap;
    w.signaled = init_.sq_sig_all || (wr.send_flags & send_flags::kSignaled);
    w.num_sge = uint16_t(wr.sg_list.size());
    uint32_t len = 0;
    Sge* sges = sq_.sges(idx);
    for (size_t k = 0; k < wr.sg_list.size(); ++k) {
      sges[k] = wr.sg_list[k];
      len += wr.sg_list[k].length;
    }
    w.length = len;
    if ((wr.send_flags & send_flags::kInline) && !is_atomic_opcode(wr.opcode) && wr.opcode != WrOpcode::rdma_read) {
      // Inline: the data is copied now; the lkeys are not looked at (IBA 11.4.1.1).
      uint8_t* dst = sq_.inline_data(idx);
      for (const Sge& s : wr.sg_list) {
        std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
        dst += s.length;
      }
      w.is_inline = true;
    }
    if (type() == QpType::ud) {
      const AhAttr& ah = wr.ah->attr();
      w.ud_dst = nic_->resolve(ah.dgid, wr.remote_qpn);
      w.ud_qpn = wr.remote_qpn & transport::kPsnMask;
      w.ud_qkey = wr.remote_qkey;
      w.ud_tclass = ah.traffic_class;
      w.ud_hop_limit = ah.hop_limit;
    }
    if (st == QpState::err) {
      w.done = true;
      w.status = WcStatus::wr_flush_err;
    }
  }
  if (bad) *bad = i;
  if (st == QpState::err) {
    transport::retire(*nic_, *this);
  } else if (i > 0) {
    nic_->schedule(*this);
    // Doorbell batching: an RC QP whose earlier packets are still
    // unacknowledged sends new WRs at the next progress (the application's
    // next poll or wait, or the ACK that arrives), so that WRs posted back to
    // back leave together, in one GSO train.  An idle QP sends at once.
    if (type() != QpType::rc || req_.una_psn == req_.next_psn) nic_->pump();
  }
  return result;
}

Status Qp::post_recv(std::span<const RecvWr> wrs, size_t* bad) {
  std::lock_guard g(nic_->mu());
  if (init_.srq || attr_.qp_state == QpState::reset) {
    if (bad) *bad = 0;
    return err::inval(init_.srq ? "post_recv on a QP that uses an SRQ (post to the SRQ)"
                                : "post_recv on a QP in RESET");
  }
  Status result = transport::post_recv_wrs(rq_, wrs, bad, "receive queue", "max_recv_sge");
  if (attr_.qp_state == QpState::err) flush_locked();
  return result;
}

}  // namespace uroce::verbs
