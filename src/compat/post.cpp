// The post verbs, reached through context->ops: ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv.
//
// A chain of work requests is converted in batches on the stack (no
// allocation, no lock of ours) into the core's SendWr/RecvWr, whose SGE
// spans point straight at the application's ibv_sge arrays (same layout),
// and posted with one call of the core per batch.  The payload is never
// copied here: the core gathers it from application memory when the packet
// leaves (inline sends are copied by the core at post time).
#include <new>

#include "compat.hpp"

namespace uroce::compat {
namespace {

static_assert(sizeof(ibv_sge) == sizeof(verbs::Sge) && offsetof(ibv_sge, addr) == offsetof(verbs::Sge, addr) &&
              offsetof(ibv_sge, length) == offsetof(verbs::Sge, length) &&
              offsetof(ibv_sge, lkey) == offsetof(verbs::Sge, lkey));
static_assert(int(verbs::WrOpcode::send_with_inv) == IBV_WR_SEND_WITH_INV &&
              int(verbs::WrOpcode::atomic_fetch_and_add) == IBV_WR_ATOMIC_FETCH_AND_ADD);
static_assert(verbs::send_flags::kInline == IBV_SEND_INLINE && verbs::send_flags::kSignaled == IBV_SEND_SIGNALED &&
              verbs::send_flags::kSolicited == IBV_SEND_SOLICITED && verbs::send_flags::kFence == IBV_SEND_FENCE);

constexpr size_t kBatch = 16;

inline std::span<const verbs::Sge> sges(const ibv_sge* list, int n) noexcept {
  return {reinterpret_cast<const verbs::Sge*>(list), size_t(n)};
}

// Room for a batch of WRs on the stack, left uninitialized: each entry is
// constructed once, with all its fields, when its WR is converted.
template <class T>
struct Slots {
  alignas(T) unsigned char raw[sizeof(T) * kBatch];
  T* at(size_t i) noexcept { return reinterpret_cast<T*>(raw) + i; }
};

// Converts one send WR into *slot; 0 or the errno value that refuses it.
inline int convert(const ibv_send_wr& w, bool ud, verbs::SendWr* slot) noexcept {
  if (w.num_sge < 0) [[unlikely]]
    return EINVAL;
  uint64_t remote_addr = 0, compare_add = 0, swap = 0;
  uint32_t rkey = 0;
  switch (w.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV: break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      remote_addr = w.wr.rdma.remote_addr;
      rkey = w.wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      remote_addr = w.wr.atomic.remote_addr;
      rkey = w.wr.atomic.rkey;
      compare_add = w.wr.atomic.compare_add;
      swap = w.wr.atomic.swap;
      break;
    case IBV_WR_LOCAL_INV: break;  // invalidate_rkey shares imm_data's place
    case IBV_WR_BIND_MW:
      if (!w.bind_mw.mw) [[unlikely]]
        return EINVAL;
      rkey = w.bind_mw.rkey;
      break;
    case IBV_WR_TSO:
    case IBV_WR_DRIVER1:
    case IBV_WR_ATOMIC_WRITE: return EOPNOTSUPP;
    default: return EINVAL;
  }
  new (slot) verbs::SendWr{
      .wr_id = w.wr_id,
      .opcode = static_cast<verbs::WrOpcode>(w.opcode),
      .send_flags = w.send_flags,
      .imm_data = w.imm_data,  // or invalidate_rkey: the same union
      .sg_list = sges(w.sg_list, w.num_sge),
      .remote_addr = remote_addr,
      .rkey = rkey,
      .compare_add = compare_add,
      .swap = swap,
      .ah = ud && w.wr.ud.ah ? to_ah(w.wr.ud.ah)->core : nullptr,
      .remote_qpn = ud ? w.wr.ud.remote_qpn : 0,
      .remote_qkey = ud ? w.wr.ud.remote_qkey : 0,
      .remote_srqn = w.qp_type.xrc.remote_srqn,  // (read by XRC_SEND QPs only)
  };
  if (w.opcode == IBV_WR_BIND_MW) {
    const ibv_mw_bind_info& b = w.bind_mw.bind_info;
    slot->bind = {w.bind_mw.mw->rkey, b.mr ? b.mr->lkey : 0, b.addr, b.length, b.mw_access_flags};
  }
  return 0;
}

const char* refusal(int err) noexcept {
  return err == EOPNOTSUPP ? "TSO and atomic write are not supported" : "invalid opcode or num_sge";
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  verbs::Qp& core = *to_qp(qp)->core;
  const bool ud = qp->qp_type == IBV_QPT_UD;
  Slots<verbs::SendWr> batch;
  ibv_send_wr* heads[kBatch];
  while (wr) {
    size_t n = 0;
    int refused = 0;
    for (; wr && n < kBatch; wr = wr->next) {
      if ((refused = convert(*wr, ud, batch.at(n)))) [[unlikely]]
        break;
      heads[n++] = wr;
    }
    if (n > 0) {
      size_t done = 0;
      Status s = core.post_send({batch.at(0), n}, &done);
      if (!s.ok()) [[unlikely]] {
        *bad_wr = heads[done];
        return fail("ibv_post_send", s);
      }
    }
    if (refused) [[unlikely]] {
      *bad_wr = wr;
      return fail("ibv_post_send", refused, refusal(refused));
    }
  }
  return 0;
}

namespace {

template <class Post>
int post_recv_chain(const char* verb, ibv_recv_wr* wr, ibv_recv_wr** bad_wr, Post&& post) {
  Slots<verbs::RecvWr> batch;
  ibv_recv_wr* heads[kBatch];
  while (wr) {
    size_t n = 0;
    bool refused = false;
    for (; wr && n < kBatch; wr = wr->next) {
      if (wr->num_sge < 0) [[unlikely]] {
        refused = true;
        break;
      }
      new (batch.at(n)) verbs::RecvWr{wr->wr_id, sges(wr->sg_list, wr->num_sge)};
      heads[n++] = wr;
    }
    if (n > 0) {
      size_t done = 0;
      Status s = post(std::span<const verbs::RecvWr>(batch.at(0), n), &done);
      if (!s.ok()) [[unlikely]] {
        *bad_wr = heads[done];
        return fail(verb, s);
      }
    }
    if (refused) [[unlikely]] {
      *bad_wr = wr;
      return fail(verb, EINVAL, "negative num_sge");
    }
  }
  return 0;
}

}  // namespace

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  verbs::Qp& core = *to_qp(qp)->core;
  return post_recv_chain("ibv_post_recv", wr, bad_wr,
                         [&](std::span<const verbs::RecvWr> wrs, size_t* done) { return core.post_recv(wrs, done); });
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  verbs::Srq& core = *to_srq(srq)->core;
  return post_recv_chain("ibv_post_srq_recv", wr, bad_wr,
                         [&](std::span<const verbs::RecvWr> wrs, size_t* done) { return core.post_recv(wrs, done); });
}

}  // namespace uroce::compat
