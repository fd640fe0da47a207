// XRC: ibv_open_xrcd / ibv_close_xrcd, ibv_get_srq_num, ibv_open_qp.  The
// XRC SRQ (ibv_create_srq_ex) is in srq.cpp, the XRC QPs (ibv_create_qp_ex)
// in qp.cpp.
#include "compat.hpp"

namespace uroce::compat {

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  const char* verb = "ibv_open_xrcd";
  Context* c = checked(verb, context);
  if (!c) return nullptr;
  if (!attr ||
      (attr->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED)))
    return fail_null<ibv_xrcd>(verb, EINVAL, "unknown comp_mask bits");
  // As rdma-core: both fields are required.
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail_null<ibv_xrcd>(verb, EINVAL, "comp_mask needs IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS");
  auto core = verbs::Xrcd::open(*c->core, attr->fd, attr->oflags);
  if (!core.ok()) return fail_null<ibv_xrcd>(verb, core.status());
  auto* x = new Xrcd{};
  x->core = core->release();
  x->ctx = c;
  x->xrcd.context = context;
  x->handle = c->handles.add(ObjKind::xrcd, x);
  return &x->xrcd;
}

int close_xrcd(ibv_xrcd* xrcd) {
  const char* verb = "ibv_close_xrcd";
  Xrcd* x = checked(verb, xrcd);
  if (!x) return errno;
  if (x->core->users().load() > 0) return fail(verb, EBUSY, "XRC SRQs or XRC_RECV QPs of the domain are still open");
  x->ctx->handles.remove(ObjKind::xrcd, x->handle);
  delete x->core;
  delete x;
  return 0;
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  Srq* s = checked("ibv_get_srq_num", srq);
  if (!s) return errno;
  if (s->core->srq_num() == 0) return fail("ibv_get_srq_num", EINVAL, "not an XRC SRQ");
  *srq_num = s->core->srq_num();
  return 0;
}

// Another process's XRC_RECV QP cannot be opened: uroce's XRC domains do
// not reach across processes (verbs/xrcd.hpp).
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr*) {
  if (!checked("ibv_open_qp", context)) return nullptr;
  return fail_null<ibv_qp>("ibv_open_qp", EOPNOTSUPP, "sharing an XRC_RECV QP across processes is not supported");
}

}  // namespace uroce::compat
