// QPs, SRQs and endpoints of ids: rdma_create_qp(_ex), rdma_destroy_qp,
// rdma_create_srq(_ex), rdma_destroy_srq, rdma_create_ep, rdma_destroy_ep.
//
// A QP made here is brought to INIT (RC/UC) or to RTS (UD, with the port
// space's Q_Key), and handed to the Cm, which moves it on when the
// connection is made.  Missing CQs are created with completion channels and
// the id as their context (what <rdma/rdma_verbs.h>'s rdma_get_*_comp
// expect).
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "rdmacm.hpp"

namespace uroce::rdmacm {
namespace {

int modify_to(CmId& c, ibv_qp* qp, ibv_qp_state st) {
  ibv_qp_attr attr{};
  attr.qp_state = st;
  int mask = 0;
  if (rdma_init_qp_attr(&c.id, &attr, &mask) != 0) return errno;
  return ibv_modify_qp(qp, &attr, mask);
}

// CQs (and channels) made by rdma_create_qp for one id that other ids' QPs
// still used when it was destroyed: rdma_create_qp hands the CQs back in
// the caller's attributes, so a program that reuses them (cmtime) has every
// QP on the first id's CQs.  rdma-core leaks them (ibv_destroy_cq is EBUSY);
// here each waits until its last QP is gone.
std::mutex g_orphans_mu;
std::vector<ibv_cq*> g_orphan_cqs;
std::vector<ibv_comp_channel*> g_orphan_channels;
std::map<ibv_cq*, int> g_cq_qps;  // QPs made by rdma_create_qp on each CQ

void count_qp(ibv_qp* qp, int delta) {
  std::lock_guard g(g_orphans_mu);
  auto add = [delta](ibv_cq* cq) {
    if (int& n = g_cq_qps[cq]; (n += delta) <= 0) g_cq_qps.erase(cq);
  };
  add(qp->send_cq);
  if (qp->recv_cq != qp->send_cq) add(qp->recv_cq);
}

// Destroys the orphans no QP (of ours) and no CQ uses any more.  Under
// g_orphans_mu.
void sweep_orphans() {
  std::erase_if(g_orphan_cqs, [](ibv_cq* cq) { return !g_cq_qps.count(cq) && ibv_destroy_cq(cq) == 0; });
  std::erase_if(g_orphan_channels, [](ibv_comp_channel* ch) {
    for (ibv_cq* cq : g_orphan_cqs)
      if (cq->channel == ch) return false;
    return ibv_destroy_comp_channel(ch) == 0;
  });
}

void destroy_own_cqs(CmId& c) {
  if (!c.own_cqs) return;
  rdma_cm_id& id = c.id;
  {
    std::lock_guard g(g_orphans_mu);
    if (id.send_cq && id.send_cq != id.recv_cq) g_orphan_cqs.push_back(id.send_cq);
    if (id.recv_cq) g_orphan_cqs.push_back(id.recv_cq);
    if (id.send_cq_channel && id.send_cq_channel != id.recv_cq_channel) g_orphan_channels.push_back(id.send_cq_channel);
    if (id.recv_cq_channel) g_orphan_channels.push_back(id.recv_cq_channel);
    sweep_orphans();
  }
  id.send_cq = id.recv_cq = nullptr;
  id.send_cq_channel = id.recv_cq_channel = nullptr;
  c.own_cqs = false;
}

// A CQ with a completion channel, the id as its context.
bool make_cq(rdma_cm_id& id, uint32_t size, ibv_cq*& cq, ibv_comp_channel*& ch) {
  ch = ibv_create_comp_channel(id.verbs);
  if (!ch) return false;
  cq = ibv_create_cq(id.verbs, int(std::max<uint32_t>(size, 1)), &id, ch, 0);
  if (!cq) {
    const int e = errno;
    ibv_destroy_comp_channel(ch);
    ch = nullptr;
    errno = e;
    return false;
  }
  return true;
}

}  // namespace
}  // namespace uroce::rdmacm

using namespace uroce;
using namespace uroce::rdmacm;

UROCE_C_API int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  CmId* c = to_cm(id);
  if (!attr) return fail("rdma_create_qp", EINVAL, "no attributes");
  if (!id->verbs || !c->dev) return fail("rdma_create_qp", EINVAL, "the id is not bound to a device yet");
  if (id->qp) return fail("rdma_create_qp", EINVAL, "the id has a QP already");
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = id->pd ? id->pd : default_pd(*c->dev);
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (!attr->pd) return fail("rdma_create_qp", ENOMEM, "no protection domain");
  if (attr->pd->context != id->verbs) return fail("rdma_create_qp", EINVAL, "the PD is of another device");
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD &&
      attr->qp_type != IBV_QPT_XRC_SEND && attr->qp_type != IBV_QPT_XRC_RECV)
    attr->qp_type = id->qp_type;
  if ((attr->qp_type == IBV_QPT_UD) != (id->qp_type == IBV_QPT_UD))
    return fail("rdma_create_qp", EINVAL, "the QP type does not fit the id's port space");
  // The passive side of an XRC connection: an XRC_RECV QP in the device's
  // XRC domain (as librdmacm, one per device); its CQs go to the id, for the
  // XRC SRQ rdma_create_srq makes.
  if (attr->qp_type == IBV_QPT_XRC_RECV && (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
    attr->xrcd = default_xrcd(*c->dev);
    if (!attr->xrcd) return fail("rdma_create_qp", errno, "cannot open the device's XRC domain");
    attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
  }
  if (!attr->send_cq || !attr->recv_cq) {
    if (!attr->recv_cq) {
      if (!make_cq(*id, attr->cap.max_recv_wr, id->recv_cq, id->recv_cq_channel)) goto cq_failed;
      c->own_cqs = true;
      attr->recv_cq = id->recv_cq;
    }
    if (!attr->send_cq) {
      if (!make_cq(*id, attr->cap.max_send_wr, id->send_cq, id->send_cq_channel)) goto cq_failed;
      c->own_cqs = true;
      attr->send_cq = id->send_cq;
    }
  }
  if (!attr->srq && id->srq) attr->srq = id->srq;
  {
    ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
    if (!qp) {
      const int e = errno;
      destroy_own_cqs(*c);
      return fail("rdma_create_qp", e, "ibv_create_qp failed");
    }
    int e = modify_to(*c, qp, IBV_QPS_INIT);
    if (!e && attr->qp_type == IBV_QPT_UD) e = modify_to(*c, qp, IBV_QPS_RTR);
    if (!e && attr->qp_type == IBV_QPT_UD) e = modify_to(*c, qp, IBV_QPS_RTS);
    if (e) {
      ibv_destroy_qp(qp);
      destroy_own_cqs(*c);
      return fail("rdma_create_qp", e, "cannot bring the new QP to its first state");
    }
    id->qp = qp;
    count_qp(qp, +1);
    id->pd = attr->pd;
    c->qpctl.qp = qp;
    cm_of(*lib()).set_qp(c->core, &c->qpctl);
  }
  return 0;
cq_failed : {
  const int e = errno;
  destroy_own_cqs(*c);
  return fail("rdma_create_qp", e, "cannot create the CQs");
}
}

UROCE_C_API int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!qp_init_attr) return fail("rdma_create_qp", EINVAL, "no attributes");
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, qp_init_attr, sizeof *qp_init_attr);
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd ? pd : id->pd;
  if (!ex.pd) ex.comp_mask = 0;
  const int r = rdma_create_qp_ex(id, &ex);
  std::memcpy(qp_init_attr, &ex, sizeof *qp_init_attr);  // CQs and granted caps
  return r;
}

UROCE_C_API void rdma_destroy_qp(rdma_cm_id* id) {
  CmId* c = to_cm(id);
  cm_of(*lib()).set_qp(c->core, nullptr);
  if (id->qp) {
    count_qp(id->qp, -1);
    ibv_destroy_qp(id->qp);
  }
  id->qp = nullptr;
  c->qpctl.qp = nullptr;
  if (c->own_cqs) {
    destroy_own_cqs(*c);
  } else {
    std::lock_guard g(g_orphans_mu);  // this QP may have been an orphan's last user
    sweep_orphans();
  }
}

UROCE_C_API int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  CmId* c = to_cm(id);
  if (!attr) return fail("rdma_create_srq", EINVAL, "no attributes");
  if (!id->verbs || !c->dev) return fail("rdma_create_srq", EINVAL, "the id is not bound to a device yet");
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = id->pd ? id->pd : default_pd(*c->dev);
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type == IBV_SRQT_XRC) {
    // As librdmacm: the device's XRC domain, and the id's receive CQ (made
    // if need be) for its completions.
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
      attr->xrcd = default_xrcd(*c->dev);
      if (!attr->xrcd) return fail("rdma_create_srq", errno, "cannot open the device's XRC domain");
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
      if (!id->recv_cq) {
        if (!make_cq(*id, attr->attr.max_wr, id->recv_cq, id->recv_cq_channel))
          return fail("rdma_create_srq", errno, "cannot create the CQ");
        c->own_cqs = true;
      }
      attr->cq = id->recv_cq;
    }
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  }
  ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
  if (!srq) return fail("rdma_create_srq", errno, "ibv_create_srq failed");
  id->srq = srq;
  id->pd = attr->pd;
  return 0;
}

UROCE_C_API int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!attr) return fail("rdma_create_srq", EINVAL, "no attributes");
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;  // as librdmacm
  ex.pd = pd ? pd : id->pd;
  if (!ex.pd) ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
  const int r = rdma_create_srq_ex(id, &ex);
  attr->attr = ex.attr;
  return r;
}

UROCE_C_API void rdma_destroy_srq(rdma_cm_id* id) {
  if (id->srq) ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

// ------------------------------------------------------------------ endpoints

UROCE_C_API int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!id || !res) return fail("rdma_create_ep", EINVAL, "no id pointer or no address");
  // XRC: the active side sends (XRC_SEND), the passive side's requests get
  // XRC_RECV QPs (rdma_xserver/rdma_xclient -c x).
  const ibv_qp_type t = res->ai_qp_type == IBV_QPT_UD         ? IBV_QPT_UD
                        : res->ai_qp_type == IBV_QPT_UC       ? IBV_QPT_UC
                        : res->ai_qp_type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_SEND
                        : res->ai_qp_type == IBV_QPT_XRC_RECV ? IBV_QPT_XRC_RECV
                                                              : IBV_QPT_RC;
  const cm::QpType ct = static_cast<cm::QpType>(t);  // verbs::QpType has ibv_qp_type's values
  const rdma_port_space ps =
      res->ai_port_space ? rdma_port_space(res->ai_port_space) : (t == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
  rdma_cm_id* cm_id;
  if (create_id(nullptr, &cm_id, nullptr, ps, ct) != 0) return -1;
  CmId* c = to_cm(cm_id);
  auto failed = [&] {
    const int e = errno;
    rdma_destroy_id(cm_id);
    errno = e;
    return -1;
  };
  if (res->ai_flags & RAI_PASSIVE) {
    if (rdma_bind_addr(cm_id, res->ai_src_addr) != 0) return failed();
    if (pd) cm_id->pd = pd;
    if (qp_init_attr) {
      c->ep_qp_attr = *qp_init_attr;
      c->ep_qp_attr->qp_type = t;
      c->ep_pd = pd;
    }
  } else {
    if (rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return failed();
    if (rdma_resolve_route(cm_id, 2000) != 0) return failed();
    if (qp_init_attr) {
      qp_init_attr->qp_type = t;
      if (rdma_create_qp(cm_id, pd, qp_init_attr) != 0) return failed();
    }
  }
  *id = cm_id;
  return 0;
}

UROCE_C_API void rdma_destroy_ep(rdma_cm_id* id) {
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}
