// Queue pairs: ibv_create_qp, ibv_create_qp_ex (through the verbs_context),
// ibv_modify_qp, ibv_query_qp, ibv_destroy_qp, ibv_qp_to_qp_ex, and the
// QP verbs uroce does not implement (multicast, ECE).
//
// Every QP is allocated as a struct ibv_qp_ex whose ibv_wr_* table is
// filled in (qp_ex.cpp), so ibv_qp_to_qp_ex() works for any QP.
#include <cstring>

#include "compat.hpp"

namespace uroce::compat {
namespace {

static_assert(int(verbs::QpType::rc) == IBV_QPT_RC && int(verbs::QpType::uc) == IBV_QPT_UC &&
              int(verbs::QpType::ud) == IBV_QPT_UD);
static_assert(int(verbs::QpState::err) == IBV_QPS_ERR && int(verbs::QpState::unknown) == IBV_QPS_UNKNOWN);
static_assert(verbs::qp_attr_mask::kDestQpn == IBV_QP_DEST_QPN &&
              verbs::qp_attr_mask::kRateLimit == IBV_QP_RATE_LIMIT &&
              verbs::qp_attr_mask::kMaxDestRdAtomic == IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(verbs::access::kOnDemand == IBV_ACCESS_ON_DEMAND &&
              verbs::access::kRelaxedOrdering == IBV_ACCESS_RELAXED_ORDERING);

// Send operations the ibv_wr_* API offers on uroce, by QP type.
constexpr uint64_t kUdOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr uint64_t kUcOps = kUdOps | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t kRcOps = kUcOps | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;

// `xrcd`: an XRC_RECV QP, which has a domain instead of a PD (pd is null).
ibv_qp* create(const char* verb, ibv_pd* pd, ibv_qp_init_attr_ex& a, Xrcd* xrcd = nullptr) {
  Pd* p = xrcd ? nullptr : checked(verb, pd);
  if (!xrcd && !p) return nullptr;
  ibv_context* context = xrcd ? xrcd->xrcd.context : pd->context;
  Context* ctx = xrcd ? xrcd->ctx : p->ctx;
  switch (a.qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_UD:
    case IBV_QPT_XRC_SEND: break;
    case IBV_QPT_XRC_RECV:
      if (!xrcd) return fail_null<ibv_qp>(verb, EINVAL, "an XRC_RECV QP needs an XRC domain (IBV_QP_INIT_ATTR_XRCD)");
      break;
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_DRIVER: return fail_null<ibv_qp>(verb, EOPNOTSUPP, "raw packet and driver QPs are not supported");
    default: return fail_null<ibv_qp>(verb, EINVAL, "unknown qp_type");
  }
  verbs::QpInitAttr init;
  init.qp_type = static_cast<verbs::QpType>(a.qp_type);
  if (a.qp_type == IBV_QPT_XRC_RECV) {
    // No CQ, SRQ or queue: what the application passed there is ignored.
    a.send_cq = a.recv_cq = nullptr;
    a.srq = nullptr;
    init.xrcd = xrcd->core;
  } else {
    // XRC_SEND has one CQ (its receive CQ and SRQ are ignored, as mlx5 does).
    if (a.qp_type == IBV_QPT_XRC_SEND) {
      a.recv_cq = a.send_cq;
      a.srq = nullptr;
    }
    if (!a.send_cq || !a.recv_cq) return fail_null<ibv_qp>(verb, EINVAL, "a QP needs a send CQ and a receive CQ");
    Cq* scq = checked(verb, a.send_cq);
    Cq* rcq = scq ? checked(verb, a.recv_cq) : nullptr;
    Srq* srq = a.srq ? checked(verb, a.srq) : nullptr;
    if (!scq || !rcq || (a.srq && !srq)) return nullptr;
    if (a.send_cq->context != context || a.recv_cq->context != context || (a.srq && a.srq->context != context))
      return fail_null<ibv_qp>(verb, EINVAL, "CQs and SRQ must belong to the PD's context");
    if (srq && srq->core->srq_num() != 0)
      return fail_null<ibv_qp>(verb, EINVAL, "an XRC SRQ takes no QP (its XRC_RECV QPs name it per message)");
    init.send_cq = scq->core;
    init.recv_cq = rcq->core;
    init.srq = srq ? srq->core : nullptr;
  }
  init.cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
  init.sq_sig_all = a.sq_sig_all != 0;
  auto* q = new Qp{};
  init.user_context = q;
  auto core = verbs::Qp::create(xrcd ? xrcd->core->pd() : *p->core, init);
  if (!core.ok()) {
    delete q;
    return fail_null<ibv_qp>(verb, core.status());
  }
  q->core = core->release();
  const verbs::QpCap& cap = q->core->init_attr().cap;  // what the QP really has
  q->wr = new_wr_builder(cap);
  a.cap = {cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data};
  ibv_qp& b = q->ex.qp_base;
  b.context = context;
  b.qp_context = a.qp_context;
  b.pd = xrcd ? nullptr : pd;
  b.send_cq = a.send_cq;
  b.recv_cq = a.recv_cq;
  b.srq = a.srq;
  b.handle = ctx->handles.add(ObjKind::qp, q);
  b.qp_num = q->core->qpn();
  b.state = IBV_QPS_RESET;
  b.qp_type = a.qp_type;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  init_qp_ex_ops(q->ex);
  return &b;
}

}  // namespace

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  const char* verb = "ibv_create_qp_ex";
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                              IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                              IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  const uint32_t mask = attr->comp_mask;
  if (mask & ~kKnown) return fail_null<ibv_qp>(verb, EINVAL, "unknown comp_mask bits");
  if (!checked(verb, context)) return nullptr;
  if (mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "RSS is not supported");
  Xrcd* xrcd = nullptr;
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    if (!(mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)
      return fail_null<ibv_qp>(verb, EINVAL, "an XRC_RECV QP needs an XRC domain (IBV_QP_INIT_ATTR_XRCD)");
    if (!(xrcd = checked(verb, attr->xrcd))) return nullptr;
    if (attr->xrcd->context != context)
      return fail_null<ibv_qp>(verb, EINVAL, "the XRC domain belongs to another context");
  } else {
    if (!(mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) return fail_null<ibv_qp>(verb, EINVAL, "a QP needs a PD");
    if (attr->pd->context != context) return fail_null<ibv_qp>(verb, EINVAL, "the PD belongs to another context");
  }
  if ((mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr->max_tso_header)
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "TSO is not supported");
  if ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "no QP create flag is supported");
  if (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    const uint64_t ok = attr->qp_type == IBV_QPT_RC || attr->qp_type == IBV_QPT_XRC_SEND ? kRcOps
                        : attr->qp_type == IBV_QPT_UC                                    ? kUcOps
                        : attr->qp_type == IBV_QPT_XRC_RECV                              ? 0
                                                                                         : kUdOps;
    if (attr->send_ops_flags & ~ok)
      return fail_null<ibv_qp>(verb, EOPNOTSUPP,
                               "send_ops_flags asks for operations this QP type does not have on uroce "
                               "(TSO, atomic write; UD: memory windows)");
  }
  return create(verb, attr->pd, *attr, xrcd);
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

UROCE_C_API ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  ibv_qp_init_attr_ex a{};
  std::memcpy(&a, qp_init_attr, sizeof *qp_init_attr);
  ibv_qp* qp = create("ibv_create_qp", pd, a);
  if (qp) qp_init_attr->cap = a.cap;
  return qp;
}

UROCE_C_API ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) { return &to_qp(qp)->ex; }

UROCE_C_API int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  const char* verb = "ibv_modify_qp";
  Qp* q = checked(verb, qp);
  if (!q) return errno;
  const uint32_t mask = uint32_t(attr_mask);
  if (mask & IBV_QP_RATE_LIMIT) return fail(verb, EOPNOTSUPP, "rate limiting is not supported");
  if (mask & IBV_QP_CAP) return fail(verb, EOPNOTSUPP, "resizing a QP is not supported");
  verbs::QpAttr a;
  if (mask & IBV_QP_STATE) a.qp_state = static_cast<verbs::QpState>(attr->qp_state);
  if (mask & IBV_QP_CUR_STATE) a.cur_qp_state = static_cast<verbs::QpState>(attr->cur_qp_state);
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = static_cast<verbs::Mtu>(attr->path_mtu);
  a.qkey = attr->qkey;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.dest_qp_num = attr->dest_qp_num;
  a.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_AV) to_core_ah(*to_ctx(qp->context), attr->ah_attr, a.ah_attr);
  a.pkey_index = attr->pkey_index;
  a.en_sqd_async_notify = attr->en_sqd_async_notify != 0;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.port_num = attr->port_num;
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  Status s = q->core->modify(a, mask);
  if (!s.ok()) return fail(verb, s);
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

UROCE_C_API int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int /*attr_mask*/, ibv_qp_init_attr* init_attr) {
  Qp* q = checked("ibv_query_qp", qp);
  if (!q) return errno;
  const verbs::QpAttr a = q->core->query();
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = static_cast<ibv_qp_state>(a.qp_state);
  attr->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
  attr->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = a.qkey;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qp_access_flags = a.qp_access_flags;
  attr->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
  from_core_ah(a.ah_attr, attr->ah_attr);
  attr->pkey_index = a.pkey_index;
  attr->en_sqd_async_notify = a.en_sqd_async_notify;
  attr->sq_draining = a.sq_draining;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  qp->state = attr->qp_state;
  if (init_attr) {
    std::memset(init_attr, 0, sizeof *init_attr);
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = attr->cap;
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = q->core->init_attr().sq_sig_all;
  }
  return 0;
}

UROCE_C_API int ibv_destroy_qp(ibv_qp* qp) {
  Qp* q = checked("ibv_destroy_qp", qp);
  if (!q) return errno;
  to_ctx(qp->context)->handles.remove(ObjKind::qp, qp->handle);
  q->core->close();  // no event about it is queued or raised from here on
  wait_async_acked(qp->mutex, qp->cond, qp->events_completed, q->async_delivered);
  delete q->core;
  delete_wr_builder(q->wr);
  pthread_cond_destroy(&qp->cond);
  pthread_mutex_destroy(&qp->mutex);
  delete q;
  return 0;
}

UROCE_C_API int ibv_query_qp_data_in_order(ibv_qp* /*qp*/, enum ibv_wr_opcode /*op*/, uint32_t /*flags*/) {
  // Packets are placed in order, but the bytes of one packet are copied with
  // memcpy, which may store the last byte first: no guarantee to offer.
  return 0;
}

// UD multicast: the GID is the group (RoCEv2: an IPv4-mapped 224.0.0.0/4
// address or an IPv6 ff00::/8 one); the LID means nothing on Ethernet.
UROCE_C_API int ibv_attach_mcast(ibv_qp* qp, const union ibv_gid* gid, uint16_t /*lid*/) {
  Qp* q = checked("ibv_attach_mcast", qp);
  if (!q) return errno;
  if (!gid) return fail("ibv_attach_mcast", EINVAL, "no GID given");
  Status s = q->core->attach_mcast(IpAddr::from_bytes(gid->raw));
  return s.ok() ? 0 : fail("ibv_attach_mcast", s);
}

UROCE_C_API int ibv_detach_mcast(ibv_qp* qp, const union ibv_gid* gid, uint16_t /*lid*/) {
  Qp* q = checked("ibv_detach_mcast", qp);
  if (!q) return errno;
  if (!gid) return fail("ibv_detach_mcast", EINVAL, "no GID given");
  Status s = q->core->detach_mcast(IpAddr::from_bytes(gid->raw));
  return s.ok() ? 0 : fail("ibv_detach_mcast", s);
}

UROCE_C_API int ibv_query_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) {
  return fail("ibv_query_ece", EOPNOTSUPP, "enhanced connection establishment is not supported");
}

UROCE_C_API int ibv_set_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) {
  return fail("ibv_set_ece", EOPNOTSUPP, "enhanced connection establishment is not supported");
}
