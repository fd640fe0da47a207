// The work-request API of struct ibv_qp_ex: ibv_wr_start, the builders
// (ibv_wr_send, ibv_wr_rdma_write, ibv_wr_atomic_fetch_add, ...), the
// setters (ibv_wr_set_sge, ibv_wr_set_inline_data, ibv_wr_set_ud_addr, ...),
// ibv_wr_complete and ibv_wr_abort.
//
// Between ibv_wr_start and ibv_wr_complete the work requests collect in the
// QP's builder (vectors that keep their capacity, so a steady stream of
// posts allocates nothing); ibv_wr_complete hands them to the core in one
// call.  SGE lists are copied (the caller may reuse its array once the
// setter returns) and so is inline data (as IBV_SEND_INLINE promises).
// A builder or setter uroce cannot honour marks the batch failed:
// ibv_wr_complete then posts nothing and returns the error (EOPNOTSUPP, or
// EINVAL for inline data above max_inline_data).  An error the core finds
// while posting (a full send queue, an invalid SGE count) stops the batch
// there: the WRs before it are posted, as ibv_post_send would do.
#include <cstring>

#include "compat.hpp"

namespace uroce::compat {

struct WrBuilder {
  std::vector<verbs::SendWr> wrs;
  std::vector<verbs::Sge> sges;     // SGEs of all WRs, in order
  std::vector<uint32_t> first_sge;  // per WR: its first index in sges
  std::vector<uint8_t> inline_wr;   // per WR: its SGEs point into `inl` (offsets)
  std::vector<uint8_t> inl;         // inline data of all WRs
  int error = 0;
  const char* why = nullptr;

  void clear() noexcept {
    wrs.clear();
    sges.clear();
    first_sge.clear();
    inline_wr.clear();
    inl.clear();
    error = 0;
    why = nullptr;
  }
};

WrBuilder* new_wr_builder(const verbs::QpCap& cap) {
  auto* b = new WrBuilder;
  b->wrs.reserve(cap.max_send_wr);
  b->first_sge.reserve(cap.max_send_wr);
  b->inline_wr.reserve(cap.max_send_wr);
  b->sges.reserve(size_t(cap.max_send_wr) * std::max<uint32_t>(cap.max_send_sge, 1));
  return b;
}

void delete_wr_builder(WrBuilder* b) noexcept { delete b; }

namespace {

inline WrBuilder& builder(ibv_qp_ex* qp) noexcept { return *to_qp(qp)->wr; }

void refuse(ibv_qp_ex* qp, int err, const char* why) noexcept {
  WrBuilder& b = builder(qp);
  if (!b.error) {
    b.error = err;
    b.why = why;
  }
}

// Starts a new WR with the QP's current wr_id and wr_flags.
inline verbs::SendWr& begin(ibv_qp_ex* qp, verbs::WrOpcode op, uint64_t remote_addr = 0, uint32_t rkey = 0) {
  WrBuilder& b = builder(qp);
  b.first_sge.push_back(uint32_t(b.sges.size()));
  b.inline_wr.push_back(0);
  return b.wrs.emplace_back(verbs::SendWr{.wr_id = qp->wr_id,
                                          .opcode = op,
                                          .send_flags = qp->wr_flags,
                                          .imm_data = 0,
                                          .sg_list = {},
                                          .remote_addr = remote_addr,
                                          .rkey = rkey,
                                          .compare_add = 0,
                                          .swap = 0,
                                          .ah = nullptr,
                                          .remote_qpn = 0,
                                          .remote_qkey = 0,
                                          .remote_srqn = 0,
                                          .bind = {}});
}

// The WR the setters apply to; nullptr (and the batch refused) if none.
inline verbs::SendWr* last(ibv_qp_ex* qp) noexcept {
  WrBuilder& b = builder(qp);
  if (b.wrs.empty()) [[unlikely]] {
    refuse(qp, EINVAL, "a setter was called before any ibv_wr_* builder");
    return nullptr;
  }
  return &b.wrs.back();
}

// Drops the data a setter gave the last WR before, so the new one replaces it.
inline void reset_data(WrBuilder& b) noexcept {
  b.sges.resize(b.first_sge.back());
  b.inline_wr.back() = 0;
}

void wr_start(ibv_qp_ex* qp) { builder(qp).clear(); }

void wr_abort(ibv_qp_ex* qp) { builder(qp).clear(); }

int wr_complete(ibv_qp_ex* qp) {
  WrBuilder& b = builder(qp);
  if (b.error) [[unlikely]] {
    const int err = b.error;
    const char* why = b.why;
    b.clear();
    return fail("ibv_wr_complete", err, why);
  }
  const size_t n = b.wrs.size();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t first = b.first_sge[i];
    const uint32_t end = i + 1 < n ? b.first_sge[i + 1] : uint32_t(b.sges.size());
    verbs::Sge* s = b.sges.data() + first;
    if (b.inline_wr[i]) [[unlikely]]
      for (uint32_t k = first; k < end; ++k) b.sges[k].addr += reinterpret_cast<uintptr_t>(b.inl.data());
    b.wrs[i].sg_list = {s, end - first};
  }
  size_t done = 0;
  Status s = to_qp(qp)->core->post_send(b.wrs, &done);
  b.clear();
  return s.ok() ? 0 : fail("ibv_wr_complete", s);
}

// ---- builders

void wr_send(ibv_qp_ex* qp) { begin(qp, verbs::WrOpcode::send); }

void wr_send_imm(ibv_qp_ex* qp, __be32 imm) { begin(qp, verbs::WrOpcode::send_with_imm).imm_data = imm; }

void wr_send_inv(ibv_qp_ex* qp, uint32_t rkey) { begin(qp, verbs::WrOpcode::send_with_inv).imm_data = rkey; }

void wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) { begin(qp, verbs::WrOpcode::rdma_write, addr, rkey); }

void wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
  begin(qp, verbs::WrOpcode::rdma_write_with_imm, addr, rkey).imm_data = imm;
}

void wr_rdma_read(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) { begin(qp, verbs::WrOpcode::rdma_read, addr, rkey); }

void wr_atomic_cmp_swp(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  verbs::SendWr& w = begin(qp, verbs::WrOpcode::atomic_cmp_and_swp, addr, rkey);
  w.compare_add = compare;
  w.swap = swap;
}

void wr_atomic_fetch_add(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t add) {
  begin(qp, verbs::WrOpcode::atomic_fetch_and_add, addr, rkey).compare_add = add;
}

void wr_bind_mw(ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (!mw || !info) [[unlikely]] {
    refuse(qp, EINVAL, "ibv_wr_bind_mw without a window or its bind information");
    return;
  }
  begin(qp, verbs::WrOpcode::bind_mw, 0, rkey).bind = {mw->rkey, info->mr ? info->mr->lkey : 0, info->addr,
                                                       info->length, info->mw_access_flags};
}
void wr_local_inv(ibv_qp_ex* qp, uint32_t rkey) { begin(qp, verbs::WrOpcode::local_inv).imm_data = rkey; }
void wr_send_tso(ibv_qp_ex* qp, void*, uint16_t, uint16_t) { refuse(qp, EOPNOTSUPP, "TSO is not supported"); }
void wr_atomic_write(ibv_qp_ex* qp, uint32_t, uint64_t, const void*) {
  refuse(qp, EOPNOTSUPP, "atomic write is not supported");
}
void wr_set_xrc_srqn(ibv_qp_ex* qp, uint32_t remote_srqn) {
  if (verbs::SendWr* w = last(qp)) w->remote_srqn = remote_srqn;
}

// ---- setters

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (verbs::SendWr* w = last(qp)) {
    w->ah = ah ? to_ah(ah)->core : nullptr;
    w->remote_qpn = remote_qpn;
    w->remote_qkey = remote_qkey;
  }
}

void wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  if (!last(qp)) return;
  WrBuilder& b = builder(qp);
  reset_data(b);
  b.sges.push_back({addr, length, lkey});
}

void wr_set_sge_list(ibv_qp_ex* qp, size_t num_sge, const ibv_sge* sg_list) {
  if (!last(qp)) return;
  WrBuilder& b = builder(qp);
  reset_data(b);
  const auto* s = reinterpret_cast<const verbs::Sge*>(sg_list);
  b.sges.insert(b.sges.end(), s, s + num_sge);
}

void wr_set_inline_data_list(ibv_qp_ex* qp, size_t num_buf, const ibv_data_buf* bufs) {
  verbs::SendWr* w = last(qp);
  if (!w) return;
  WrBuilder& b = builder(qp);
  reset_data(b);
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (total > to_qp(qp)->core->init_attr().cap.max_inline_data) {
    refuse(qp, EINVAL, "inline data above the QP's max_inline_data");
    return;
  }
  // One SGE holding the offset into `inl`; made absolute in wr_complete
  // (the vector may still grow).
  const size_t off = b.inl.size();
  for (size_t i = 0; i < num_buf; ++i) {
    const auto* p = static_cast<const uint8_t*>(bufs[i].addr);
    b.inl.insert(b.inl.end(), p, p + bufs[i].length);
  }
  b.sges.push_back({off, uint32_t(total), 0});
  b.inline_wr.back() = 1;
  w->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qp, 1, &buf);
}

}  // namespace

void init_qp_ex_ops(ibv_qp_ex& ex) noexcept {
  ex.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  ex.wr_atomic_fetch_add = wr_atomic_fetch_add;
  ex.wr_bind_mw = wr_bind_mw;
  ex.wr_local_inv = wr_local_inv;
  ex.wr_rdma_read = wr_rdma_read;
  ex.wr_rdma_write = wr_rdma_write;
  ex.wr_rdma_write_imm = wr_rdma_write_imm;
  ex.wr_send = wr_send;
  ex.wr_send_imm = wr_send_imm;
  ex.wr_send_inv = wr_send_inv;
  ex.wr_send_tso = wr_send_tso;
  ex.wr_set_ud_addr = wr_set_ud_addr;
  ex.wr_set_xrc_srqn = wr_set_xrc_srqn;
  ex.wr_set_inline_data = wr_set_inline_data;
  ex.wr_set_inline_data_list = wr_set_inline_data_list;
  ex.wr_set_sge = wr_set_sge;
  ex.wr_set_sge_list = wr_set_sge_list;
  ex.wr_start = wr_start;
  ex.wr_complete = wr_complete;
  ex.wr_abort = wr_abort;
  ex.wr_atomic_write = wr_atomic_write;
}

}  // namespace uroce::compat
