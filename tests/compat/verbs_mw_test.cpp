// Memory windows through the C ABI (issue 13): type 1 bound by ibv_bind_mw
// and revoked by a zero-length bind, type 2 bound by IBV_WR_BIND_MW to a QP
// and revoked by LOCAL_INV or the peer's SEND_WITH_INV; RDMA through a
// window moves exactly the bytes asked inside it, and every access the grant
// does not cover (outside the range, a right not granted, another QP, a
// revoked or stale rkey) fails REM_ACCESS_ERR without a byte moving.
#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

constexpr size_t kWin = 4096;  // the window lies at target_[1024, 1024 + kWin)

class Mw : public Verbs {
 protected:
  void SetUp() override {
    Verbs::SetUp();
    // A region the windows are bound to: local write and bind rights only,
    // no remote right of its own.
    target_.assign(64 * 1024, 0);
    bind_mr_ = ibv_reg_mr(pd_, target_.data(), target_.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    ASSERT_NE(bind_mr_, nullptr) << std::strerror(errno);
  }
  void TearDown() override {
    for (ibv_mw* w : mws_) EXPECT_EQ(ibv_dealloc_mw(w), 0);
    mws_.clear();
    if (bind_mr_) {
      EXPECT_EQ(ibv_dereg_mr(bind_mr_), 0);
    }
    Verbs::TearDown();
  }

  struct Pair {
    ibv_qp *a, *b;  // a: the requester; b: owns the window (type 2)
    ibv_cq *ca, *cb;
  };
  Pair pair() {
    Pair p{};
    p.ca = cq();
    p.cb = cq();
    p.a = qp(IBV_QPT_RC, p.ca, p.ca);
    p.b = qp(IBV_QPT_RC, p.cb, p.cb);
    connect(p.a, p.b->qp_num);
    connect(p.b, p.a->qp_num);
    return p;
  }
  ibv_mw* alloc(ibv_mw_type t) {
    ibv_mw* w = ibv_alloc_mw(pd_, t);
    EXPECT_NE(w, nullptr) << std::strerror(errno);
    if (w) mws_.push_back(w);
    return w;
  }
  uint64_t win_addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(target_.data()) + 1024 + off; }

  // One completion from `c`: its status (and opcode in `op`).
  static ibv_wc one(ibv_cq* c) {
    auto w = poll(c, 1);
    EXPECT_EQ(w.size(), 1u);
    return w.empty() ? ibv_wc{} : w[0];
  }

  // Posts a type 2 bind of [win_addr(), +kWin) with `access` on `q`, grant
  // rkey `rkey`; the completion's status.
  ibv_wc_status bind2(ibv_qp* q, ibv_cq* c, ibv_mw* w, uint32_t rkey, unsigned access, size_t len = kWin,
                      ibv_mr* mr = nullptr) {
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = w;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info = {mr ? mr : bind_mr_, win_addr(), len, access};
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(q, &wr, &bad), 0);
    const ibv_wc wc = one(c);
    if (wc.status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    }
    return wc.status;
  }

  // An RDMA WRITE (or READ) of `len` bytes between buf_[0..] and window
  // address `va` with `rkey` from `q`; the requester's completion status.
  static ibv_wc_status rdma(ibv_qp* q, ibv_cq* c, ibv_wr_opcode op, ibv_sge s, uint64_t va, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = va;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(q, &wr, &bad), 0);
    return one(c).status;
  }

  // The window's bytes are `fill` everywhere but [at, at+n), which holds
  // pattern `seed`; the region around the window is untouched (0).
  void expect_target(size_t at, size_t n, int seed, uint8_t fill = 0) {
    for (size_t i = 0; i < target_.size(); ++i) {
      const bool in_win = i >= 1024 && i < 1024 + kWin;
      const bool written = in_win && i - 1024 >= at && i - 1024 < at + n;
      const uint8_t want = written ? uint8_t(seed + (i - 1024 - at) * 7) : in_win ? fill : 0;
      ASSERT_EQ(target_[i], want) << "byte " << i;
    }
  }
  void pattern(size_t n, int seed) {
    for (size_t i = 0; i < n; ++i) buf_[i] = uint8_t(seed + i * 7);
  }

  std::vector<uint8_t> target_;
  ibv_mr* bind_mr_ = nullptr;
  std::vector<ibv_mw*> mws_;
};

TEST_F(Mw, DeviceAndAllocation) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_GT(a.orig_attr.max_mw, 1000);
  EXPECT_TRUE(a.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(a.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, ibv_mw_type(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mw* w1 = alloc(IBV_MW_TYPE_1);
  ibv_mw* w2 = alloc(IBV_MW_TYPE_2);
  ASSERT_TRUE(w1 && w2);
  EXPECT_EQ(w1->type, IBV_MW_TYPE_1);
  EXPECT_EQ(w2->pd, pd_);
  EXPECT_NE(w1->rkey, w2->rkey);
  EXPECT_NE(w1->rkey >> 8, mr_->rkey >> 8) << "window and region keys never meet";
}

TEST_F(Mw, Type1BoundWrittenReadAndRevoked) {
  Pair p = pair();
  ibv_mw* w = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(w, nullptr);
  const uint32_t before = w->rkey;
  ibv_mw_bind mb{};
  mb.wr_id = 5;
  mb.send_flags = IBV_SEND_SIGNALED;
  mb.bind_info = {bind_mr_, win_addr(), kWin, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  ASSERT_EQ(ibv_bind_mw(p.b, w, &mb), 0);
  EXPECT_EQ(w->rkey, ibv_inc_rkey(before)) << "the grant's rkey: the low byte incremented";
  const ibv_wc bw = one(p.cb);
  EXPECT_EQ(bw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(bw.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(bw.wr_id, 5u);
  // Type 1: any QP of the PD may use it; here a's peer b owns the region.
  pattern(100, 3);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 100), win_addr(200), w->rkey), IBV_WC_SUCCESS);
  expect_target(200, 100, 3);
  std::memset(buf_.data() + 8192, 0, 100);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_READ, sge(8192, 100), win_addr(200), w->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_.data() + 8192, buf_.data(), 100), 0);
  // Revoked by a bind of length 0: the old grant's rkey fails, nothing moves.
  mb.bind_info = {nullptr, 0, 0, 0};
  const uint32_t granted = w->rkey;
  ASSERT_EQ(ibv_bind_mw(p.b, w, &mb), 0);
  EXPECT_EQ(one(p.cb).status, IBV_WC_SUCCESS);
  pattern(100, 9);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 100), win_addr(200), granted), IBV_WC_REM_ACCESS_ERR);
  expect_target(200, 100, 3);
}

TEST_F(Mw, AccessOutsideTheGrantIsRefused) {
  ibv_mw* w = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(w, nullptr);
  {
    Pair p = pair();
    ibv_mw_bind mb{};
    mb.send_flags = IBV_SEND_SIGNALED;
    mb.bind_info = {bind_mr_, win_addr(), kWin, IBV_ACCESS_REMOTE_WRITE};  // no READ
    ASSERT_EQ(ibv_bind_mw(p.b, w, &mb), 0);
    EXPECT_EQ(one(p.cb).status, IBV_WC_SUCCESS);
    EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_READ, sge(0, 8), win_addr(), w->rkey), IBV_WC_REM_ACCESS_ERR);
  }
  pattern(64, 1);
  // One byte beyond the window's end, one byte before its start: refused.
  for (uint64_t va : {win_addr(kWin - 63), win_addr() - 1}) {
    Pair p = pair();
    EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 64), va, w->rkey), IBV_WC_REM_ACCESS_ERR);
  }
  {
    Pair p = pair();  // a stale grant: the window's earlier rkey
    EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 64), win_addr(), w->rkey - 1), IBV_WC_REM_ACCESS_ERR);
  }
  expect_target(0, 0, 0);
  Pair p = pair();  // exactly the last 64 bytes: allowed
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 64), win_addr(kWin - 64), w->rkey), IBV_WC_SUCCESS);
  expect_target(kWin - 64, 64, 1);
}

TEST_F(Mw, Type2BelongsToTheQpThatBoundIt) {
  Pair p = pair();
  ibv_mw* w = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t grant = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(p.b, p.cb, w, grant, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
  // A bound type 2 window cannot be bound again before it is revoked.
  EXPECT_EQ(bind2(p.b, p.cb, w, ibv_inc_rkey(grant), IBV_ACCESS_REMOTE_WRITE), IBV_WC_MW_BIND_ERR);
  Pair q = pair();
  ASSERT_EQ(bind2(q.b, q.cb, w, ibv_inc_rkey(grant), IBV_ACCESS_REMOTE_WRITE), IBV_WC_MW_BIND_ERR)
      << "(still bound to p.b)";
  // Only the peer of the QP it is bound to may use it.
  Pair r = pair();
  pattern(32, 4);
  EXPECT_EQ(rdma(r.a, r.ca, IBV_WR_RDMA_WRITE, sge(0, 32), win_addr(), grant), IBV_WC_REM_ACCESS_ERR);
  expect_target(0, 0, 0);
}

TEST_F(Mw, Type2ThroughItsQpThenLocalInvalidate) {
  Pair p = pair();
  ibv_mw* w = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t grant = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(p.b, p.cb, w, grant, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
  pattern(500, 6);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 500), win_addr(1000), grant), IBV_WC_SUCCESS);
  expect_target(1000, 500, 6);
  std::memset(buf_.data() + 8192, 0, 500);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_READ, sge(8192, 500), win_addr(1000), grant), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_.data() + 8192, buf_.data(), 500), 0);
  // LOCAL_INV on the owning QP revokes it.
  ibv_send_wr inv{};
  inv.wr_id = 8;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = grant;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.b, &inv, &bad), 0);
  const ibv_wc iw = one(p.cb);
  EXPECT_EQ(iw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(iw.opcode, IBV_WC_LOCAL_INV);
  // Free again: bound anew with another tag, the old grant stays refused.
  const uint32_t grant2 = ibv_inc_rkey(grant);
  ASSERT_EQ(bind2(p.b, p.cb, w, grant2, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  pattern(500, 11);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 500), win_addr(1000), grant), IBV_WC_REM_ACCESS_ERR);
  expect_target(1000, 500, 6);
}

TEST_F(Mw, Type2RevokedByThePeersSendWithInvalidate) {
  Pair p = pair();
  ibv_mw* w = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t grant = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(p.b, p.cb, w, grant, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  ASSERT_EQ(post_recv(p.b, 21, 500000, 64), 0);
  pattern(16, 2);
  ibv_sge s = sge(0, 16);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.invalidate_rkey = grant;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, &wr, &bad), 0);
  EXPECT_EQ(one(p.ca).status, IBV_WC_SUCCESS);
  const ibv_wc rw = one(p.cb);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(rw.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(rw.invalidated_rkey, grant);
  EXPECT_EQ(rw.byte_len, 16u);
  EXPECT_EQ(std::memcmp(buf_.data() + 500000, buf_.data(), 16), 0);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 16), win_addr(), grant), IBV_WC_REM_ACCESS_ERR);
  expect_target(0, 0, 0);
}

TEST_F(Mw, SendWithInvalidateOfNoWindowIsAnInvalidRequest) {
  Pair p = pair();
  ASSERT_EQ(post_recv(p.b, 21, 500000, 64), 0);
  ibv_sge s = sge(0, 16);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.invalidate_rkey = mr_->rkey;  // a region's rkey: nothing to revoke
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, &wr, &bad), 0);
  EXPECT_EQ(one(p.ca).status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(one(p.cb).status, IBV_WC_REM_INV_REQ_ERR);
}

// The bind rules (IBA C10-72..75): each broken one completes MW_BIND_ERR
// (and moves the QP to ERR), and the window stays unbound.
TEST_F(Mw, BindRulesAreEnforced) {
  ibv_mw* w = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t grant = ibv_inc_rkey(w->rkey);
  std::vector<uint8_t> other(8192);
  ibv_mr* no_bind = ibv_reg_mr(pd_, other.data(), other.size(), int(IBV_ACCESS_LOCAL_WRITE));
  ibv_mr* read_only = ibv_reg_mr(pd_, other.data(), other.size(), int(IBV_ACCESS_MW_BIND));
  ibv_pd* pd2 = ibv_alloc_pd(ctx_);
  ibv_mr* other_pd = ibv_reg_mr(pd2, other.data(), other.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_TRUE(no_bind && read_only && pd2 && other_pd);
  struct Case {
    const char* what;
    ibv_mr* mr;
    uint32_t rkey;
    unsigned access;
    size_t len;
  };
  const Case cases[] = {
      {"a region without MW_BIND", no_bind, grant, IBV_ACCESS_REMOTE_READ, 1024},
      {"a writable window on a region without LOCAL_WRITE", read_only, grant, IBV_ACCESS_REMOTE_WRITE, 1024},
      {"a region of another PD", other_pd, grant, IBV_ACCESS_REMOTE_READ, 1024},
      {"a range beyond the region", bind_mr_, grant, IBV_ACCESS_REMOTE_READ, target_.size()},
      {"an rkey whose upper 24 bits are not the window's", bind_mr_, grant ^ 0x100, IBV_ACCESS_REMOTE_READ, 1024},
      {"a type 2 bind of length 0", bind_mr_, grant, IBV_ACCESS_REMOTE_READ, 0},
  };
  for (const Case& c : cases) {
    Pair p = pair();
    const ibv_mr* mr = c.mr;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = w;
    wr.bind_mw.rkey = c.rkey;
    wr.bind_mw.bind_info = {const_cast<ibv_mr*>(mr),
                            mr == bind_mr_ ? win_addr() : reinterpret_cast<uintptr_t>(other.data()), c.len, c.access};
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.b, &wr, &bad), 0) << c.what;
    EXPECT_EQ(one(p.cb).status, IBV_WC_MW_BIND_ERR) << c.what;
  }
  // None of them bound it: a type 2 window binds only when free.
  Pair p = pair();
  EXPECT_EQ(bind2(p.b, p.cb, w, grant, IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(other_pd), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  EXPECT_EQ(ibv_dereg_mr(read_only), 0);
  EXPECT_EQ(ibv_dereg_mr(no_bind), 0);
}

// A region with a bound window cannot be deregistered (EINVAL, as rxe);
// freeing the window revokes its grant and lets the region go.
TEST_F(Mw, DeallocRevokesAndFreesTheRegion) {
  Pair p = pair();
  ibv_mw* w = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t grant = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(p.b, p.cb, w, grant, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  errno = 0;
  EXPECT_EQ(ibv_dereg_mr(bind_mr_), EINVAL);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(bind_mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ),
            IBV_REREG_MR_ERR_INPUT)
      << "the region may not change under a bound window";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY) << "the window holds the PD";
  ASSERT_EQ(ibv_dealloc_mw(w), 0);
  pattern(8, 1);
  EXPECT_EQ(rdma(p.a, p.ca, IBV_WR_RDMA_WRITE, sge(0, 8), win_addr(), grant), IBV_WC_REM_ACCESS_ERR);
  expect_target(0, 0, 0);
  EXPECT_EQ(ibv_dereg_mr(bind_mr_), 0);
  bind_mr_ = nullptr;
}

}  // namespace
}  // namespace compat_test
