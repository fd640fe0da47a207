// Protection domains and memory regions: ibv_alloc_pd, ibv_reg_mr and its
// iova variants, ibv_rereg_mr, ibv_dereg_mr; the fork helpers (a software
// NIC pins nothing, so fork needs no preparation); imports and dma-buf
// registration (not supported).
#include <memory>

#include "compat.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace uroce;
using namespace uroce::compat;

namespace {

// Optional access flags (IBV_ACCESS_OPTIONAL_RANGE) are hints a provider
// may ignore; relaxed ordering is the only one the core knows.
constexpr unsigned kOptionalIgnored = IBV_ACCESS_OPTIONAL_RANGE & ~unsigned(IBV_ACCESS_RELAXED_ORDERING);

ibv_mr* reg(const char* verb, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  Pd* p = checked(verb, pd);
  if (!p) return nullptr;
  access &= ~kOptionalIgnored;
  auto core = verbs::Mr::reg(*p->core, reinterpret_cast<uintptr_t>(addr), length, iova, access);
  if (!core.ok()) return fail_null<ibv_mr>(verb, core.status());
  auto* m = new Mr{};
  m->core = core->release();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = p->ctx->handles.add(ObjKind::mr, m);
  m->mr.lkey = m->core->lkey();
  m->mr.rkey = m->core->rkey();
  return &m->mr;
}

}  // namespace

UROCE_C_API ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Context* c = checked("ibv_alloc_pd", context);
  if (!c) return nullptr;
  auto core = verbs::Pd::create(*c->core);
  if (!core.ok()) return fail_null<ibv_pd>("ibv_alloc_pd", core.status());
  auto* p = new Pd{};
  p->core = core->release();
  p->ctx = c;
  p->pd.context = context;
  p->pd.handle = c->handles.add(ObjKind::pd, p);
  return &p->pd;
}

UROCE_C_API int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = checked("ibv_dealloc_pd", pd);
  if (!p) return errno;
  if (const int n = p->core->users().load(); n > 0)
    return fail("ibv_dealloc_pd", EBUSY, "QPs, MRs, SRQs or AHs of this PD still exist");
  p->ctx->handles.remove(ObjKind::pd, pd->handle);
  delete p->core;
  delete p;
  return 0;
}

UROCE_C_API ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  const uint64_t iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : reinterpret_cast<uintptr_t>(addr);
  return reg("ibv_reg_mr", pd, addr, length, iova, unsigned(access));
}

UROCE_C_API ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return reg("ibv_reg_mr_iova", pd, addr, length, iova, unsigned(access));
}

UROCE_C_API ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return reg("ibv_reg_mr_iova2", pd, addr, length, iova, access);
}

UROCE_C_API ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* /*pd*/, uint64_t /*offset*/, size_t /*length*/, uint64_t /*iova*/,
                                      int /*fd*/, int /*access*/) {
  return fail_null<ibv_mr>("ibv_reg_dmabuf_mr", EOPNOTSUPP, "dma-buf memory is device memory; uroce has none");
}

// The region changes in place and keeps its lkey and rkey, as with kernel
// providers; if it fails, the old region is untouched and
// IBV_REREG_MR_ERR_INPUT is returned.
UROCE_C_API int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  Mr* m = checked("ibv_rereg_mr", mr);
  if (!m) return IBV_REREG_MR_ERR_INPUT;
  if (flags <= 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) {
    fail("ibv_rereg_mr", EINVAL, "flags must be a non-empty set of IBV_REREG_MR_CHANGE_*");
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  const size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  const unsigned new_access =
      (flags & IBV_REREG_MR_CHANGE_ACCESS) ? unsigned(access) & ~kOptionalIgnored : m->core->access();
  const uint64_t iova = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<uintptr_t>(addr) : m->core->iova();
  Pd* np = checked("ibv_rereg_mr", new_pd);
  if (!np) return IBV_REREG_MR_ERR_INPUT;
  if (new_pd->context != mr->context) {
    fail("ibv_rereg_mr", EINVAL, "the new PD must belong to the MR's context");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (Status st = m->core->rereg(*np->core, reinterpret_cast<uintptr_t>(new_addr), new_len, iova, new_access);
      !st.ok()) {
    fail("ibv_rereg_mr", st);
    return IBV_REREG_MR_ERR_INPUT;
  }
  mr->pd = new_pd;
  mr->addr = new_addr;
  mr->length = new_len;
  return 0;
}

UROCE_C_API int ibv_dereg_mr(ibv_mr* mr) {
  Mr* m = checked("ibv_dereg_mr", mr);
  if (!m) return errno;
  if (m->core->windows() > 0)  // as rxe
    return fail("ibv_dereg_mr", EINVAL, "memory windows are bound to the region: revoke or free them first");
  to_ctx(mr->context)->handles.remove(ObjKind::mr, mr->handle);
  delete m->core;  // leaves every lookup under the NIC lock: no packet is using it afterwards
  delete m;
  return 0;
}

// ------------------------------------------------------------------ fork

// Nothing is pinned: memory registered with uroce behaves across fork() as
// any other memory of the process (the NIC itself stays with the parent).
UROCE_C_API int ibv_fork_init(void) { return 0; }
UROCE_C_API enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
UROCE_C_API int ibv_dontfork_range(void* /*base*/, size_t /*size*/) { return 0; }
UROCE_C_API int ibv_dofork_range(void* /*base*/, size_t /*size*/) { return 0; }

// ------------------------------------------------------------------ import (not supported)

UROCE_C_API ibv_pd* ibv_import_pd(ibv_context* /*context*/, uint32_t /*pd_handle*/) {
  return fail_null<ibv_pd>("ibv_import_pd", EOPNOTSUPP, "objects cannot be shared between processes");
}
UROCE_C_API void ibv_unimport_pd(ibv_pd* /*pd*/) {}
UROCE_C_API ibv_mr* ibv_import_mr(ibv_pd* /*pd*/, uint32_t /*mr_handle*/) {
  return fail_null<ibv_mr>("ibv_import_mr", EOPNOTSUPP, "objects cannot be shared between processes");
}
UROCE_C_API void ibv_unimport_mr(ibv_mr* /*mr*/) {}
UROCE_C_API ibv_dm* ibv_import_dm(ibv_context* /*context*/, uint32_t /*dm_handle*/) {
  return fail_null<ibv_dm>("ibv_import_dm", EOPNOTSUPP, "uroce has no device memory");
}
UROCE_C_API void ibv_unimport_dm(ibv_dm* /*dm*/) {}

// ------------------------------------------------------------------ memory windows

namespace uroce::compat {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  Pd* p = checked("ibv_alloc_mw", pd);
  if (!p) return nullptr;
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
    return fail_null<ibv_mw>("ibv_alloc_mw", EINVAL, "type must be IBV_MW_TYPE_1 or IBV_MW_TYPE_2");
  auto core = verbs::Mw::alloc(*p->core, type == IBV_MW_TYPE_1 ? verbs::MwType::type1 : verbs::MwType::type2);
  if (!core.ok()) return fail_null<ibv_mw>("ibv_alloc_mw", core.status());
  auto* m = new Mw{};
  m->core = core->release();
  m->mw.context = pd->context;
  m->mw.pd = pd;
  m->mw.rkey = m->core->rkey();
  m->mw.type = type;
  m->mw.handle = p->ctx->handles.add(ObjKind::mw, m);
  return &m->mw;
}

// ibv_bind_mw (type 1; verbs.h has checked the type, the region's PD and
// that a range comes with a region): a BIND_MW work request on `qp` whose
// grant is the window's rkey with the low byte incremented, as rdma-core's
// providers make it; the window takes that rkey once the request is posted.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (!checked("ibv_bind_mw", qp) || !checked("ibv_bind_mw", mw)) return errno;
  if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
    return fail("ibv_bind_mw", EINVAL, "a type 1 window cannot be zero-based");
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  if (const int e = post_send(qp, &wr, &bad); e != 0) return e;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

int dealloc_mw(ibv_mw* mw) {
  Mw* m = checked("ibv_dealloc_mw", mw);
  if (!m) return errno;
  to_ctx(mw->context)->handles.remove(ObjKind::mw, mw->handle);
  delete m->core;  // revokes its grant under the NIC lock
  delete m;
  return 0;
}

}  // namespace uroce::compat
