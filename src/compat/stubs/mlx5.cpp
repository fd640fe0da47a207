// Stand-in libmlx5.so.1: perftest links the mlx5 direct-verbs library and
// calls it only for mlx5 devices (DC transport, DEVX queries, AES-XTS).
// A uroce device is not one: every entry point answers "not supported"
// (EOPNOTSUPP, errno set), and the library needs nothing from libibverbs.
#include <infiniband/mlx5dv.h>

#include <cerrno>

#define UROCE_C_API extern "C" __attribute__((visibility("default")))

UROCE_C_API bool mlx5dv_is_supported(struct ibv_device* /*device*/) { return false; }

UROCE_C_API struct ibv_context* mlx5dv_open_device(struct ibv_device* /*device*/,
                                                   struct mlx5dv_context_attr* /*attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API struct ibv_qp* mlx5dv_create_qp(struct ibv_context* /*context*/,
                                            struct ibv_qp_init_attr_ex* /*qp_attr*/,
                                            struct mlx5dv_qp_init_attr* /*mlx5_qp_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API struct mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex* /*qp*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API int mlx5dv_devx_general_cmd(struct ibv_context* /*context*/, const void* /*in*/, size_t /*inlen*/,
                                        void* /*out*/, size_t /*outlen*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

UROCE_C_API struct mlx5dv_mkey* mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr* /*attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API int mlx5dv_destroy_mkey(struct mlx5dv_mkey* /*mkey*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

UROCE_C_API int mlx5dv_crypto_login(struct ibv_context* /*context*/,
                                    struct mlx5dv_crypto_login_attr* /*attr*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

UROCE_C_API struct mlx5dv_dek* mlx5dv_dek_create(struct ibv_context* /*context*/,
                                                 struct mlx5dv_dek_init_attr* /*init_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_C_API int mlx5dv_dek_destroy(struct mlx5dv_dek* /*dek*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}
