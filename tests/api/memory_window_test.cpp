// Memory windows through the public C++ API: ProtectionDomain::alloc_mw,
// MemoryWindow::bind / unbind / invalidate as work requests; RDMA through
// a grant moves exactly its bytes, a revoked grant moves none.
#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

constexpr size_t kWinOff = 8192, kWin = 4096;

// B's buffer, registered a second time for binding (MW_BIND, no remote
// right of its own), with windows of B's PD.
struct Windows : ::testing::Test {
  Pair p;
  std::optional<MemoryRegion> bindable;
  void SetUp() override {
    bindable =
        must(p.b.pd->reg_mr(std::span<std::byte>(p.b.buf), access::kLocalWrite | access::kMwBind), "reg_mr MW_BIND");
  }
  uint64_t win(size_t off = 0) const { return bindable->addr() + kWinOff + off; }
  // A's WRITE of `n` bytes of pattern `seed` to window address `va`.
  WcStatus write(uint64_t va, uint32_t rkey, size_t n, uint32_t seed) {
    fill({p.a.at(0), n}, seed);
    Sge s = p.a.sge(0, uint32_t(n));
    must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, va, rkey)), "post WRITE");
    return wait_wc(*p.a.scq).status;
  }
  bool holds(size_t off, size_t n, uint32_t seed) {
    std::vector<std::byte> want(n);
    fill(want, seed);
    return std::memcmp(p.b.at(kWinOff + off), want.data(), n) == 0;
  }
};

TEST_F(Windows, Type2GrantWriteReadAndInvalidate) {
  MemoryWindow w = must(p.b.pd->alloc_mw(MwType::type2), "alloc_mw");
  EXPECT_EQ(w.type(), MwType::type2);
  const SendWr bind = w.bind(*bindable, win(), kWin, access::kRemoteWrite | access::kRemoteRead, 3);
  const uint32_t grant = bind.rkey;
  EXPECT_EQ(grant >> 8, w.rkey() >> 8);
  EXPECT_NE(grant, w.rkey()) << "a new grant: the low byte moved";
  must(p.b.qp->post_send(bind), "post BIND_MW");
  const Wc bw = wait_wc(*p.b.scq);
  EXPECT_EQ(bw.status, WcStatus::success);
  EXPECT_EQ(bw.opcode, WcOpcode::bind_mw);
  EXPECT_EQ(w.rkey(), grant);
  ASSERT_EQ(write(win(100), grant, 1000, 7), WcStatus::success);
  EXPECT_TRUE(holds(100, 1000, 7));
  Sge back = p.a.sge(64 * 1024, 1000);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_read, back, win(100), grant)), "post READ");
  ASSERT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(p.a.at(64 * 1024), p.b.at(kWinOff + 100), 1000), 0);
  must(p.b.qp->post_send(MemoryWindow::invalidate(grant, 4)), "post LOCAL_INV");
  const Wc iw = wait_wc(*p.b.scq);
  EXPECT_EQ(iw.status, WcStatus::success);
  EXPECT_EQ(iw.opcode, WcOpcode::local_inv);
  EXPECT_EQ(write(win(100), grant, 1000, 8), WcStatus::rem_access_err);
  EXPECT_TRUE(holds(100, 1000, 7)) << "not a byte moved";
}

TEST_F(Windows, Type1RebindAndUnbind) {
  MemoryWindow w = must(p.b.pd->alloc_mw(MwType::type1), "alloc_mw");
  const SendWr bind = w.bind(*bindable, win(), kWin, access::kRemoteWrite);
  must(p.b.qp->post_send(bind), "post BIND_MW");
  ASSERT_EQ(wait_wc(*p.b.scq).status, WcStatus::success);
  ASSERT_EQ(write(win(kWin - 16), bind.rkey, 16, 1), WcStatus::success);
  EXPECT_TRUE(holds(kWin - 16, 16, 1));
  must(p.b.qp->post_send(w.unbind()), "post unbind");
  ASSERT_EQ(wait_wc(*p.b.scq).status, WcStatus::success);
  EXPECT_EQ(write(win(0), bind.rkey, 16, 2), WcStatus::rem_access_err);
  EXPECT_FALSE(holds(0, 16, 2));
}

// Destroying the region revokes its windows (the C ABI refuses to
// deregister it instead): a grant on it fails afterwards, nothing faults.
TEST_F(Windows, DestroyingTheRegionRevokesItsWindows) {
  MemoryWindow w = must(p.b.pd->alloc_mw(MwType::type1), "alloc_mw");
  const SendWr bind = w.bind(*bindable, win(), kWin, access::kRemoteWrite);
  must(p.b.qp->post_send(bind), "post BIND_MW");
  ASSERT_EQ(wait_wc(*p.b.scq).status, WcStatus::success);
  const uint64_t va = win(0);
  bindable.reset();
  EXPECT_EQ(write(va, bind.rkey, 16, 3), WcStatus::rem_access_err);
}

}  // namespace
}  // namespace uroce::apitest
