// Names of enum values, the MTU helper and the version.
#include "impl.hpp"

#ifndef UROCE_VERSION
#define UROCE_VERSION "unknown"
#endif

namespace uroce {

const char* version() noexcept { return UROCE_VERSION; }

const char* to_string(WcOpcode op) noexcept {
  switch (op) {
    case WcOpcode::send: return "SEND";
    case WcOpcode::rdma_write: return "RDMA_WRITE";
    case WcOpcode::rdma_read: return "RDMA_READ";
    case WcOpcode::comp_swap: return "COMP_SWAP";
    case WcOpcode::fetch_add: return "FETCH_ADD";
    case WcOpcode::bind_mw: return "BIND_MW";
    case WcOpcode::local_inv: return "LOCAL_INV";
    case WcOpcode::recv: return "RECV";
    case WcOpcode::recv_rdma_with_imm: return "RECV_RDMA_WITH_IMM";
  }
  return "?";
}

const char* to_string(WrOpcode op) noexcept {
  switch (op) {
    case WrOpcode::rdma_write: return "RDMA_WRITE";
    case WrOpcode::rdma_write_with_imm: return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::send: return "SEND";
    case WrOpcode::send_with_imm: return "SEND_WITH_IMM";
    case WrOpcode::rdma_read: return "RDMA_READ";
    case WrOpcode::atomic_cmp_and_swp: return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::atomic_fetch_and_add: return "ATOMIC_FETCH_AND_ADD";
    case WrOpcode::local_inv: return "LOCAL_INV";
    case WrOpcode::bind_mw: return "BIND_MW";
    case WrOpcode::send_with_inv: return "SEND_WITH_INV";
  }
  return "?";
}

const char* to_string(AsyncEventType t) noexcept {
  static constexpr const char* names[] = {"CQ_ERR",
                                          "QP_FATAL",
                                          "QP_REQ_ERR",
                                          "QP_ACCESS_ERR",
                                          "COMM_EST",
                                          "SQ_DRAINED",
                                          "PATH_MIG",
                                          "PATH_MIG_ERR",
                                          "DEVICE_FATAL",
                                          "PORT_ACTIVE",
                                          "PORT_ERR",
                                          "LID_CHANGE",
                                          "PKEY_CHANGE",
                                          "SM_CHANGE",
                                          "SRQ_ERR",
                                          "SRQ_LIMIT_REACHED",
                                          "QP_LAST_WQE_REACHED",
                                          "CLIENT_REREGISTER",
                                          "GID_CHANGE",
                                          "WQ_FATAL"};
  const auto i = uint32_t(t);
  return i < sizeof names / sizeof *names ? names[i] : "?";
}

Result<Mtu> mtu_from_bytes(uint32_t bytes) {
  for (Mtu m : {Mtu::m256, Mtu::m512, Mtu::m1024, Mtu::m2048, Mtu::m4096})
    if (mtu_bytes(m) == bytes) return m;
  return err::inval("MTU " + std::to_string(bytes) + " is not one of 256, 512, 1024, 2048, 4096");
}

}  // namespace uroce
