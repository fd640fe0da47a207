// Shared receive queues: ibv_create_srq, ibv_create_srq_ex (basic and XRC
// SRQs), ibv_modify_srq (resize and the limit event), ibv_query_srq,
// ibv_destroy_srq.  Posting (ibv_post_srq_recv) is in post.cpp.
#include "compat.hpp"

namespace uroce::compat {
namespace {

static_assert(verbs::srq_attr_mask::kMaxWr == IBV_SRQ_MAX_WR && verbs::srq_attr_mask::kLimit == IBV_SRQ_LIMIT);

ibv_srq* create(const char* verb, ibv_pd* pd, void* srq_context, ibv_srq_attr& attr,
                const verbs::XrcSrqInit* xrc = nullptr) {
  Pd* p = checked(verb, pd);
  if (!p) return nullptr;
  auto* s = new Srq{};
  auto core = verbs::Srq::create(*p->core, {attr.max_wr, attr.max_sge, attr.srq_limit}, s, xrc);
  if (!core.ok()) {
    delete s;
    return fail_null<ibv_srq>(verb, core.status());
  }
  s->core = core->release();
  const verbs::SrqAttr real = s->core->query();
  attr.max_wr = real.max_wr;
  attr.max_sge = real.max_sge;
  ibv_srq& b = s->srq;
  b.context = pd->context;
  b.srq_context = srq_context;
  b.pd = pd;
  b.handle = p->ctx->handles.add(ObjKind::srq, s);
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  return &b;
}

}  // namespace

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  const char* verb = "ibv_create_srq_ex";
  if (attr->comp_mask & ~uint32_t(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                                  IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM))
    return fail_null<ibv_srq>(verb, EINVAL, "unknown comp_mask bits");
  if (!checked(verb, context)) return nullptr;
  const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM || (attr->comp_mask & IBV_SRQ_INIT_ATTR_TM))
    return fail_null<ibv_srq>(verb, EOPNOTSUPP, "tag-matching SRQs are not supported");
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) return fail_null<ibv_srq>(verb, EINVAL, "unknown srq_type");
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context)
    return fail_null<ibv_srq>(verb, EINVAL, "an SRQ needs a PD of this context");
  if (type == IBV_SRQT_BASIC) return create(verb, attr->pd, attr->srq_context, attr->attr);
  // XRC: a domain and the CQ its receive completions go to.
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->xrcd ||
      !attr->cq)
    return fail_null<ibv_srq>(verb, EINVAL, "an XRC SRQ needs an XRC domain and a CQ");
  Xrcd* x = checked(verb, attr->xrcd);
  Cq* cq = x ? checked(verb, attr->cq) : nullptr;
  if (!x || !cq) return nullptr;
  if (attr->xrcd->context != context || attr->cq->context != context)
    return fail_null<ibv_srq>(verb, EINVAL, "the XRC domain and CQ must belong to this context");
  const verbs::XrcSrqInit xrc{x->core, cq->core};
  return create(verb, attr->pd, attr->srq_context, attr->attr, &xrc);
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

UROCE_C_API ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  return create("ibv_create_srq", pd, srq_init_attr->srq_context, srq_init_attr->attr);
}

UROCE_C_API int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  Srq* q = checked("ibv_modify_srq", srq);
  if (!q) return errno;
  if (srq_attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return fail("ibv_modify_srq", EINVAL, "unknown mask bits");
  Status s = q->core->modify({srq_attr->max_wr, srq_attr->max_sge, srq_attr->srq_limit}, uint32_t(srq_attr_mask));
  return s.ok() ? 0 : fail("ibv_modify_srq", s);
}

UROCE_C_API int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  Srq* q = checked("ibv_query_srq", srq);
  if (!q) return errno;
  const verbs::SrqAttr a = q->core->query();
  srq_attr->max_wr = a.max_wr;
  srq_attr->max_sge = a.max_sge;
  srq_attr->srq_limit = a.srq_limit;
  return 0;
}

UROCE_C_API int ibv_destroy_srq(ibv_srq* srq) {
  Srq* s = checked("ibv_destroy_srq", srq);
  if (!s) return errno;
  if (s->core->users().load() > 0) return fail("ibv_destroy_srq", EBUSY, "QPs still use this SRQ");
  to_ctx(srq->context)->handles.remove(ObjKind::srq, srq->handle);
  s->core->close();  // no event about it is queued or raised from here on
  wait_async_acked(srq->mutex, srq->cond, srq->events_completed, s->async_delivered);
  delete s->core;
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  delete s;
  return 0;
}
