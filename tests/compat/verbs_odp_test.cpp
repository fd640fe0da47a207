// compat.Verbs: on-demand paging (IBV_ACCESS_ON_DEMAND) and implicit ODP.
#include "verbs_fixture.hpp"

namespace compat_test {

// ------------------------------------------------------------------ ODP

// Implicit ODP covers the whole address space; a peer's access to memory
// that is not mapped (or not writable, for a write or an atomic) is a remote
// access error, and the process that owns the memory does not crash.
TEST_F(Verbs, OdpAccessToUnmappedMemoryIsARemoteAccessError) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto* area =
      static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  uint8_t* rw = area;
  uint8_t* ro = area + page;
  uint8_t* gone = area + 2 * page;
  std::memset(ro, 0x5a, page);
  ASSERT_EQ(mprotect(ro, page, PROT_READ), 0);
  ASSERT_EQ(munmap(gone, page), 0);

  // Without ODP, registering a range with a hole fails; with ODP it does not.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, area, 3 * page, int(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* explicit_odp = ibv_reg_mr(pd_, area, 3 * page, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(explicit_odp, nullptr);
  ibv_mr* implicit = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(implicit, nullptr) << std::strerror(errno);
  EXPECT_EQ(implicit->length, SIZE_MAX);

  ibv_cq* c = cq();
  // One fresh pair per access (an error moves the requester to ERR).
  auto access = [&](ibv_wr_opcode op, uint8_t* target, uint32_t rkey) {
    ibv_qp* a = qp(IBV_QPT_RC, c, c);
    ibv_qp* b = qp(IBV_QPT_RC, c, c);
    connect(a, b->qp_num);
    connect(b, a->qp_num);
    ibv_sge s = sge(0, 8);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(target);
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 1;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target);
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(a, &wr, &bad), 0);
    auto wc = poll(c, 1);
    return wc.size() == 1 ? wc[0].status : IBV_WC_GENERAL_ERR;
  };
  std::memcpy(&buf_[0], "odp-data", 8);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rw, implicit->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(rw, "odp-data", 8), 0);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, ro, implicit->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[0], 0x5a);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, gone, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, gone, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, ro, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_ATOMIC_FETCH_AND_ADD, ro, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, gone, explicit_odp->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, nullptr, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_ATOMIC_FETCH_AND_ADD, rw + 8, implicit->rkey), IBV_WC_SUCCESS);

  // Prefetch faults mapped ranges in and refuses the others.
  ibv_sge s{reinterpret_cast<uintptr_t>(rw), uint32_t(page), implicit->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IB_UVERBS_ADVISE_MR_FLAG_FLUSH, &s, 1), 0);
  s.addr = reinterpret_cast<uintptr_t>(ro);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &s, 1), EFAULT);
  s.addr = reinterpret_cast<uintptr_t>(gone);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), EFAULT);
  s = sge(0, 8);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), EOPNOTSUPP);  // not ODP

  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_dereg_mr(implicit), 0);
  EXPECT_EQ(ibv_dereg_mr(explicit_odp), 0);
  munmap(area, 2 * page);
}

}  // namespace compat_test
