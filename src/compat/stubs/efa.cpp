// Stand-in libefa.so.1: perftest links the EFA direct-verbs library and
// calls it only for EFA devices (the SRD transport).  A uroce device is not
// one: every entry point answers "not supported" (EOPNOTSUPP, errno set).
#include <infiniband/efadv.h>

#include <cerrno>

#define UROCE_C_API extern "C" __attribute__((visibility("default")))

UROCE_C_API struct ibv_qp* efadv_create_qp_ex(struct ibv_context* /*ibvctx*/,
                                              struct ibv_qp_init_attr_ex* /*attr_ex*/,
                                              struct efadv_qp_init_attr* /*efa_attr*/, uint32_t /*inlen*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API int efadv_query_device(struct ibv_context* /*ibvctx*/, struct efadv_device_attr* /*attr*/,
                                   uint32_t /*inlen*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}
