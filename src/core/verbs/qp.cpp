#include "verbs/qp.hpp"

#include <cstring>

#include "common/log.hpp"
#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"
#include "verbs/ah.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp_state_table.hpp"
#include "verbs/srq.hpp"
#include "verbs/xrcd.hpp"
#include "wire/headers.hpp"

namespace uroce::verbs {

namespace m = qp_attr_mask;

Qp::Qp(Pd& pd, const QpInitAttr& init) : pd_(&pd), nic_(&pd.context().nic()), init_(init) {}

Result<std::unique_ptr<Qp>> Qp::create(Pd& pd, const QpInitAttr& in) {
  QpInitAttr init = in;
  const QpType t = init.qp_type;
  if (t != QpType::rc && t != QpType::uc && t != QpType::ud && t != QpType::xrc_send && t != QpType::xrc_recv)
    return err::inval("qp_type " + std::to_string(int(t)) + " is not RC, UC, UD, XRC_SEND or XRC_RECV");
  if (t == QpType::xrc_recv) {
    // Receives only, into the XRC SRQs its requests name: no CQ, no queue.
    if (!init.xrcd || &init.xrcd->pd() != &pd) return err::inval("an XRC_RECV QP needs an XRC domain");
    init.send_cq = init.recv_cq = nullptr;
    init.srq = nullptr;
    init.cap = QpCap{};
  } else if (t == QpType::xrc_send) {
    // Sends only, to the XRC SRQs its WRs name: one CQ, no receive queue.
    if (!init.send_cq) return err::inval("an XRC_SEND QP needs a send CQ");
    init.recv_cq = init.send_cq;
    init.srq = nullptr;
    init.xrcd = nullptr;
    init.cap.max_recv_wr = init.cap.max_recv_sge = 0;
  } else {
    init.xrcd = nullptr;
    if (!init.send_cq || !init.recv_cq) return err::inval("a QP needs a send CQ and a receive CQ");
  }
  if ((init.send_cq && &init.send_cq->context() != &pd.context()) ||
      (init.recv_cq && &init.recv_cq->context() != &pd.context()))
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
  const bool sends = t != QpType::xrc_recv, receives = !init.srq && t != QpType::xrc_send && t != QpType::xrc_recv;
  if (sends) cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  if (receives) cap.max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
  if (sends) cap.max_inline_data = std::max<uint32_t>(cap.max_inline_data, 64);

  std::unique_ptr<Qp> qp(new Qp(pd, init));
  transport::EngineInit ei;
  ei.type = init.qp_type;
  ei.cap = cap;
  ei.sq_sig_all = init.sq_sig_all;
  ei.send_cq = init.send_cq;
  ei.recv_cq = init.recv_cq;
  ei.srq = init.srq;
  ei.xrcd = init.xrcd ? init.xrcd->id() : 0;
  if (init.xrcd) ei.xrcd_file = init.xrcd->file_key();
  ei.memory = &pd;
  ei.owner = qp.get();
  qp->engine_ = std::make_unique<transport::QpEngine>(*qp->nic_, ei);
  // Counted before anything can fail: ~Qp gives them back.
  pd.users()++;
  if (init.send_cq) init.send_cq->users()++;
  if (init.recv_cq) init.recv_cq->users()++;
  if (init.srq) init.srq->users()++;
  if (init.xrcd) init.xrcd->users()++;
  UROCE_TRY(qp->nic_->attach(*qp->engine_));
  qp->qpn_ = qp->engine_->qpn();
  qp->nic_->start_progress_thread();
  return qp;
}

QpState Qp::state() const noexcept { return engine_->state(); }

transport::EngineSnapshot Qp::debug_snapshot() const {
  std::lock_guard g(nic_->mu());
  return engine_->snapshot();
}

void Qp::close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (engine_) {
    std::lock_guard g(nic_->mu());
    engine_->close();
  }
  pd_->context().forget_async_events(this);
}

Qp::~Qp() {
  close();
  pd_->users()--;
  if (init_.send_cq) init_.send_cq->users()--;
  if (init_.recv_cq) init_.recv_cq->users()--;
  if (init_.srq) init_.srq->users()--;
  if (init_.xrcd) init_.xrcd->users()--;
}

QpAttr Qp::query() const {
  std::lock_guard g(nic_->mu());
  return engine_->query();
}

Status Qp::modify(const QpAttr& attr, uint32_t mask) {
  std::lock_guard g(nic_->mu());
  Status s = modify_locked(attr, mask);
  if (!s.ok()) UROCE_LOG(debug, "modify_qp 0x%x: %s", qpn_, s.to_string().c_str());
  return s;
}

Status Qp::modify_locked(const QpAttr& a, uint32_t mask) {
  const QpState cur = engine_->state();
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
  if (mask & m::kPathMtu) {
    if (uint8_t(a.path_mtu) < 1 || uint8_t(a.path_mtu) > 5) return err::inval("path_mtu must be 1..5 (256..4096)");
    const uint32_t mtu = mtu_bytes(a.path_mtu);
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
  if ((mask & m::kDestQpn) && a.dest_qp_num > wire::kPsnMask) return err::inval("dest_qp_num above 2^24");

  engine_->modify(a, mask, next, ctx.port_attr().active_mtu_bytes);
  // What the QP completed and nobody polled goes with it (mlx4/mlx5 clean
  // a QP's CQEs so when it is reset).
  if (next == QpState::reset && cur != QpState::reset) {
    if (init_.send_cq) init_.send_cq->discard_qp_locked(qpn_);
    if (init_.recv_cq && init_.recv_cq != init_.send_cq) init_.recv_cq->discard_qp_locked(qpn_);
  }
  return {};
}

void Qp::async_event(AsyncEventType type) noexcept { pd_->context().post_async_event({type, this}); }

// Post-time checks are the ones rdma-core's providers make (the SGE count,
// the inline size, an atomic's 8-byte buffer, a UD WR's address handle) and
// the opcodes uroce does not implement.  What the QP cannot execute is not
// refused here: see send_plan().
Status Qp::validate_send(const SendWr& wr) const {
  switch (wr.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
    case WrOpcode::rdma_read:
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::send_with_inv:
    case WrOpcode::bind_mw:
    case WrOpcode::local_inv: break;
    default: return err::inval("opcode " + std::to_string(int(wr.opcode)) + " is not supported");
  }
  if (wr.sg_list.size() > init_.cap.max_send_sge)
    return err::inval("num_sge " + std::to_string(wr.sg_list.size()) + " above max_send_sge " +
                      std::to_string(init_.cap.max_send_sge));
  uint64_t len = 0;
  for (const Sge& s : wr.sg_list) len += s.length;
  if (len > (1ull << 31)) return err::inval("message longer than 2 GiB");
  if ((wr.send_flags & send_flags::kInline) && len > init_.cap.max_inline_data)
    return err::inval("inline message of " + std::to_string(len) + " bytes above max_inline_data " +
                      std::to_string(init_.cap.max_inline_data));
  if (is_atomic_opcode(wr.opcode) && len != 8 && !wr.sg_list.empty())
    return err::inval("an atomic's local buffer must be 8 bytes");
  if (type() == QpType::ud && !wr.ah) return err::inval("UD send without an address handle");
  return {};
}

// A NIC queues what the QP cannot execute and fails it when its requester
// reaches the WR, as the kernel's rxe does: an opcode the QP's transport
// does not have, or a UD address handle of another PD, completes
// LOC_QP_OP_ERR and moves the QP to ERR.  A UD message above the port's
// MTU leaves no packet and completes successfully (IBA C10-93.1.1).
transport::SendPlan Qp::send_plan(const SendWr& wr) const noexcept {
  const QpType t = type();
  transport::SendPlan plan;
  const bool rc_only =
      wr.opcode == WrOpcode::rdma_read || is_atomic_opcode(wr.opcode) || wr.opcode == WrOpcode::send_with_inv;
  const bool write = wr.opcode == WrOpcode::rdma_write || wr.opcode == WrOpcode::rdma_write_with_imm;
  // Memory windows are bound and revoked through connected QPs only.
  const bool window = wr.opcode == WrOpcode::bind_mw || wr.opcode == WrOpcode::local_inv;
  if ((rc_only && t != QpType::rc && t != QpType::xrc_send) || ((write || window) && t == QpType::ud))
    plan.fail = WcStatus::loc_qp_op_err;
  if (t == QpType::ud && wr.ah) {
    if (&wr.ah->pd() != pd_) plan.fail = WcStatus::loc_qp_op_err;
    uint64_t len = 0;
    for (const Sge& s : wr.sg_list) len += s.length;
    plan.silent = len > pd_->context().port_attr().active_mtu_bytes;
  }
  return plan;
}

Status Qp::post_send(std::span<const SendWr> wrs, size_t* bad) {
  std::lock_guard g(nic_->mu());
  const QpState st = engine_->state();
  if (type() == QpType::xrc_recv) {
    if (bad) *bad = 0;
    return err::inval("post_send on an XRC_RECV QP (it has no send queue)");
  }
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
    if (!engine_->post_send(wr, type() == QpType::ud ? &wr.ah->attr() : nullptr, send_plan(wr))) {
      result = err::nomem(engine_->sq_full() ? "send queue full (" + std::to_string(engine_->sq_max_wr()) + " WRs)"
                                             : std::string("out of memory to grow the send queue"));
      break;
    }
  }
  if (bad) *bad = i;
  engine_->ring_doorbell(i);
  return result;
}

Status Qp::post_recv(std::span<const RecvWr> wrs, size_t* bad) {
  std::lock_guard g(nic_->mu());
  if (type() == QpType::xrc_send || type() == QpType::xrc_recv) {
    if (bad) *bad = 0;
    return err::inval("post_recv on an XRC QP (XRC receives go to an XRC SRQ)");
  }
  if (init_.srq || engine_->state() == QpState::reset) {
    if (bad) *bad = 0;
    return err::inval(init_.srq ? "post_recv on a QP that uses an SRQ (post to the SRQ)"
                                : "post_recv on a QP in RESET");
  }
  return engine_->post_recv(wrs, bad);
}

Status Qp::attach_mcast(const IpAddr& group) {
  if (type() != QpType::ud) return err::inval("only UD QPs join multicast groups");
  if (!group.is_multicast()) return err::inval(group.to_string() + " is not a multicast GID");
  return nic_->attach_mcast(group, qpn_);
}

Status Qp::detach_mcast(const IpAddr& group) {
  if (!group.is_multicast()) return err::inval(group.to_string() + " is not a multicast GID");
  return nic_->detach_mcast(group, qpn_);
}

}  // namespace uroce::verbs
