// Value types of the verbs interface: enums, work requests, completions,
// attributes.  Numeric values equal rdma-core's <infiniband/verbs.h> ones, so
// the C ABI in compat converts by static_cast (compat static_asserts this),
// but the core does not depend on those headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "uroce/ip_addr.hpp"

namespace uroce::verbs {

class Ah;

// Memory window types (ibv_mw_type): type 1 belongs to its PD, type 2 to
// the QP that binds it.
enum class MwType : uint8_t { type1 = 1, type2 = 2 };

enum class QpType : uint8_t { rc = 2, uc = 3, ud = 4, xrc_send = 9, xrc_recv = 10 };
enum class QpState : uint8_t { reset = 0, init, rtr, rts, sqd, sqe, err, unknown };
const char* to_string(QpState s) noexcept;
const char* to_string(QpType t) noexcept;

enum class WrOpcode : uint8_t {
  rdma_write = 0,
  rdma_write_with_imm = 1,
  send = 2,
  send_with_imm = 3,
  rdma_read = 4,
  atomic_cmp_and_swp = 5,
  atomic_fetch_and_add = 6,
  local_inv = 7,
  bind_mw = 8,
  send_with_inv = 9,
};

inline constexpr bool is_atomic_opcode(WrOpcode op) noexcept {
  return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add;
}

enum class WcStatus : uint32_t {
  success = 0,
  loc_len_err,
  loc_qp_op_err,
  loc_eec_op_err,
  loc_prot_err,
  wr_flush_err,
  mw_bind_err,
  bad_resp_err,
  loc_access_err,
  rem_inv_req_err,
  rem_access_err,
  rem_op_err,
  retry_exc_err,
  rnr_retry_exc_err,
  loc_rdd_viol_err,
  rem_inv_rd_req_err,
  rem_abort_err,
  inv_eecn_err,
  inv_eec_state_err,
  fatal_err,
  resp_timeout_err,
  general_err,
};
const char* to_string(WcStatus s) noexcept;

enum class WcOpcode : uint32_t {
  send = 0,
  rdma_write = 1,
  rdma_read = 2,
  comp_swap = 3,
  fetch_add = 4,
  bind_mw = 5,
  local_inv = 6,
  recv = 128,
  recv_rdma_with_imm = 129,
};

namespace send_flags {
inline constexpr uint32_t kFence = 1u << 0;
inline constexpr uint32_t kSignaled = 1u << 1;
inline constexpr uint32_t kSolicited = 1u << 2;
inline constexpr uint32_t kInline = 1u << 3;
}  // namespace send_flags

namespace wc_flags {
inline constexpr uint32_t kGrh = 1u << 0;
inline constexpr uint32_t kWithImm = 1u << 1;
inline constexpr uint32_t kWithInv = 1u << 3;
}  // namespace wc_flags

namespace access {
inline constexpr uint32_t kLocalWrite = 1u << 0;
inline constexpr uint32_t kRemoteWrite = 1u << 1;
inline constexpr uint32_t kRemoteRead = 1u << 2;
inline constexpr uint32_t kRemoteAtomic = 1u << 3;
inline constexpr uint32_t kMwBind = 1u << 4;
inline constexpr uint32_t kZeroBased = 1u << 5;
inline constexpr uint32_t kOnDemand = 1u << 6;
inline constexpr uint32_t kHugetlb = 1u << 7;
inline constexpr uint32_t kRelaxedOrdering = 1u << 20;
inline constexpr uint32_t kKnown = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kMwBind | kZeroBased |
                                   kOnDemand | kHugetlb | kRelaxedOrdering;
}  // namespace access

// Gather/scatter element; same layout as struct ibv_sge.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;
  uint32_t send_flags = 0;
  uint32_t imm_data = 0;  // __be32 as the application holds it (or the rkey
                          // to invalidate for send_with_inv)
  std::span<const Sge> sg_list;
  // RDMA WRITE/READ
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // atomics (remote_addr/rkey above give the target)
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // UD
  const Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // XRC_SEND: the XRC SRQ (at the peer) the message is for
  uint32_t remote_srqn = 0;
  // BIND_MW: the window (any rkey it has had), the grant's new rkey in
  // `rkey` above, the region (its lkey), the range and the remote rights.
  struct MwBind {
    uint32_t mw_rkey = 0;
    uint32_t mr_lkey = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  } bind = {};
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

// Work completion; same layout as struct ibv_wc (compat copies it whole).
struct Wc {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::success;
  WcOpcode opcode = WcOpcode::send;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // __be32 as on the wire, or the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
};
static_assert(sizeof(Wc) == 48);

// Address vector (RoCEv2: always global, the GID is the IP address).
struct AhAttr {
  IpAddr dgid;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  bool is_global = true;
  uint8_t sl = 0;
  uint8_t port_num = 1;
  uint16_t dlid = 0;
};

namespace qp_attr_mask {
inline constexpr uint32_t kState = 1u << 0;
inline constexpr uint32_t kCurState = 1u << 1;
inline constexpr uint32_t kEnSqdAsyncNotify = 1u << 2;
inline constexpr uint32_t kAccessFlags = 1u << 3;
inline constexpr uint32_t kPkeyIndex = 1u << 4;
inline constexpr uint32_t kPort = 1u << 5;
inline constexpr uint32_t kQkey = 1u << 6;
inline constexpr uint32_t kAv = 1u << 7;
inline constexpr uint32_t kPathMtu = 1u << 8;
inline constexpr uint32_t kTimeout = 1u << 9;
inline constexpr uint32_t kRetryCnt = 1u << 10;
inline constexpr uint32_t kRnrRetry = 1u << 11;
inline constexpr uint32_t kRqPsn = 1u << 12;
inline constexpr uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr uint32_t kAltPath = 1u << 14;
inline constexpr uint32_t kMinRnrTimer = 1u << 15;
inline constexpr uint32_t kSqPsn = 1u << 16;
inline constexpr uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr uint32_t kPathMigState = 1u << 18;
inline constexpr uint32_t kCap = 1u << 19;
inline constexpr uint32_t kDestQpn = 1u << 20;
inline constexpr uint32_t kRateLimit = 1u << 25;
}  // namespace qp_attr_mask

// IB path MTU enum: 1=256 .. 5=4096.
enum class Mtu : uint8_t { m256 = 1, m512 = 2, m1024 = 3, m2048 = 4, m4096 = 5 };
inline constexpr uint32_t mtu_bytes(Mtu m) noexcept { return 128u << uint8_t(m); }

struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

struct QpAttr {
  QpState qp_state = QpState::reset;
  QpState cur_qp_state = QpState::reset;
  Mtu path_mtu = Mtu::m1024;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCap cap;
  AhAttr ah_attr;
  uint16_t pkey_index = 0;
  bool sq_draining = false;
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t port_num = 1;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  bool en_sqd_async_notify = false;
};

// Limits the NIC really enforces (what ibv_query_device reports).
struct DeviceAttr {
  uint64_t max_mr_size = ~0ull;
  uint64_t page_size_cap = 4096;
  uint32_t max_qp = (1u << 14) - 2;
  uint32_t max_qp_wr;
  uint32_t max_sge;
  uint32_t max_cq;
  uint32_t max_cqe;
  uint32_t max_mr;
  uint32_t max_pd = 1u << 20;
  uint32_t max_qp_rd_atom;
  uint32_t max_qp_init_rd_atom;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  uint32_t max_ah = 1u << 20;
  uint32_t max_inline;
  uint16_t max_pkeys = 1;
  uint64_t sys_image_guid = 0;
  uint64_t node_guid = 0;
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  uint32_t hw_ver = 0;
};

struct PortAttr {
  uint32_t active_mtu_bytes = 4096;  // path MTU ceiling of this port
  uint32_t max_mtu_bytes = 4096;
  uint32_t gid_tbl_len = 1;
  uint32_t max_msg_sz = 1u << 31;

  // The largest IB MTU not above active_mtu_bytes.
  Mtu active_mtu() const noexcept {
    Mtu m = Mtu::m256;
    for (Mtu c : {Mtu::m512, Mtu::m1024, Mtu::m2048, Mtu::m4096})
      if (mtu_bytes(c) <= active_mtu_bytes) m = c;
    return m;
  }
};

enum class AsyncEventType : uint32_t {
  cq_err = 0,
  qp_fatal,
  qp_req_err,
  qp_access_err,
  comm_est,
  sq_drained,
  path_mig,
  path_mig_err,
  device_fatal,
  port_active,
  port_err,
  lid_change,
  pkey_change,
  sm_change,
  srq_err,
  srq_limit_reached,
  qp_last_wqe_reached,
  client_reregister,
  gid_change,
  wq_fatal,
};

}  // namespace uroce::verbs
