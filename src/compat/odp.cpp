// On-demand paging.  A software NIC needs no pinning, so every registration
// is cheap; IBV_ACCESS_ON_DEMAND additionally skips the check that the range
// is mapped (implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND) covers
// the whole address space), and pages are checked -- and faulted in -- when
// a packet touches them (verbs::Mr::translate): a peer's access to memory
// that is not mapped is answered with a remote access error.
//
// ibv_advise_mr(PREFETCH, PREFETCH_WRITE) faults the given ranges in ahead
// of time; PREFETCH_NO_FAULT has nothing to do.
#include "compat.hpp"

namespace uroce::compat {

int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t /*flags*/, ibv_sge* sg_list, uint32_t num_sges) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return fail("ibv_advise_mr", EOPNOTSUPP, "unknown advice");
  if (num_sges == 0 || !sg_list) return fail("ibv_advise_mr", EINVAL, "no SGE given");
  Pd* p = checked("ibv_advise_mr", pd);
  if (!p) return errno;
  for (uint32_t i = 0; i < num_sges; ++i) {
    const ibv_sge& s = sg_list[i];
    const verbs::Mr* mr = verbs::MrTable::instance().lookup(s.lkey, verbs::KeyKind::local);
    if (!mr || mr->pd() != p->core) return fail("ibv_advise_mr", EINVAL, "lkey is not a memory region of this PD");
    if (!(mr->access() & verbs::access::kOnDemand))
      return fail("ibv_advise_mr", EOPNOTSUPP, "only on-demand memory regions take advice");
    if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) continue;
    const uint32_t need = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? verbs::access::kLocalWrite : 0;
    if (!mr->translate(s.addr, s.length, need))
      return fail("ibv_advise_mr", EFAULT, "range is not mapped (or not writable) in this process");
  }
  return 0;
}

}  // namespace uroce::compat
