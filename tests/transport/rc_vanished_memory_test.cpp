// Registered memory that the application unmapped or re-protected while it
// was registered (issue 11, row 2): a NIC would keep the pinned pages;
// uroce pins nothing, and must neither crash nor move a byte elsewhere.
// Each access becomes the error completion a failed access gets: a peer's
// WRITE or atomic REM_ACCESS_ERR (the responder's QP in ERR, IBA class C),
// a SEND into such a receive buffer LOC_PROT_ERR at the receiver and
// REM_OP_ERR at the sender, a gather from such memory LOC_PROT_ERR.
#include <sys/mman.h>
#include <unistd.h>

#include "common/fault_guard.hpp"
#include "loopback.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
const size_t kPage = size_t(::sysconf(_SC_PAGESIZE));

// Two pages of B's, registered, then taken away as `how` says.
enum class Gone { unmapped, read_only, no_access };
struct Doomed {
  uint8_t* p;
  std::unique_ptr<Mr> mr;
  Doomed(Pd& pd, uint32_t acc) {
    p = static_cast<uint8_t*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) std::abort();
    std::memset(p, 0x5c, 2 * kPage);
    mr = reg_mr(pd, p, 2 * kPage, acc);
  }
  void take(Gone how) {
    if (how == Gone::unmapped)
      ASSERT_EQ(::munmap(p, 2 * kPage), 0);
    else
      ASSERT_EQ(::mprotect(p, 2 * kPage, how == Gone::read_only ? PROT_READ : PROT_NONE), 0);
  }
  ~Doomed() {
    mr.reset();
    ::munmap(p, 2 * kPage);  // (again: harmless)
  }
  uint64_t addr() const { return uint64_t(uintptr_t(p)); }
};

class VanishedMemory : public ::testing::TestWithParam<Gone> {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_THREAD__)
    // TSan's signal interception does not hand a fault in its memcpy to the
    // guard's handler (the copy faults again and again): the guard is
    // checked by the plain and ASan builds.
    GTEST_SKIP() << "fault recovery is not available under ThreadSanitizer";
#endif
  }
};

TEST_P(VanishedMemory, PeerWriteAndAtomicAreAccessErrors) {
  for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::atomic_fetch_and_add}) {
    Pair p;
    Doomed d(*p.b.pd, kAll);
    ASSERT_TRUE(d.mr);
    d.take(GetParam());
    const uint64_t recovered = fault_guard::recovered();
    Sge s = p.a.sge(0, op == WrOpcode::rdma_write ? 3000 : 8);
    SendWr wr;
    wr.wr_id = 7;
    wr.opcode = op;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    wr.remote_addr = d.addr() + 64;
    wr.rkey = d.mr->rkey();
    wr.compare_add = 1;
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    auto wc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::rem_access_err) << (op == WrOpcode::rdma_write ? "WRITE" : "atomic");
    EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);
    EXPECT_EQ(p.b.counters().resp_memory_faults, 1u);
    EXPECT_GT(fault_guard::recovered(), recovered);
    if (GetParam() == Gone::read_only) {
      for (size_t i = 0; i < 2 * kPage; ++i) ASSERT_EQ(d.p[i], 0x5c) << "byte " << i << " changed";
    }
  }
}

TEST_P(VanishedMemory, SendIntoAVanishedReceiveBuffer) {
  Pair p;
  Doomed d(*p.b.pd, access::kLocalWrite);
  ASSERT_TRUE(d.mr);
  ASSERT_TRUE(post_recv(*p.b.qp, 21, {Sge{d.addr(), uint32_t(2 * kPage), d.mr->lkey()}}).ok());
  d.take(GetParam());
  Sge s = p.a.sge(0, 5000);
  SendWr wr;
  wr.wr_id = 8;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 21u);
  EXPECT_EQ(rc[0].status, WcStatus::loc_prot_err);
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_NE(sc[0].status, WcStatus::success);
}

TEST_P(VanishedMemory, GatherOfTwoSgesFromVanishedMemoryIsLocalProtectionError) {
  if (GetParam() == Gone::read_only) GTEST_SKIP() << "read-only memory can still be sent";
  Pair p;
  Doomed d(*p.a.pd, access::kLocalWrite);
  ASSERT_TRUE(d.mr);
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 4096)}).ok());
  d.take(GetParam());
  Sge s[2] = {p.a.sge(0, 100), Sge{d.addr() + 10, 200, d.mr->lkey()}};
  SendWr wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {s, 2};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::loc_prot_err);
}

// The zero-copy paths read application memory while the packet is built
// (its ICRC): a single-SGE SEND from it, and a READ the peer asks of it.
TEST_P(VanishedMemory, SendAndReadFromVanishedMemory) {
  if (GetParam() == Gone::read_only) GTEST_SKIP() << "read-only memory can still be sent and read";
  {
    Pair p;
    Doomed d(*p.a.pd, access::kLocalWrite);
    ASSERT_TRUE(d.mr);
    ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 8192)}).ok());
    d.take(GetParam());
    Sge s{d.addr() + 10, 5000, d.mr->lkey()};
    SendWr wr;
    wr.wr_id = 10;
    wr.opcode = WrOpcode::send;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    auto sc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::loc_prot_err);
  }
  {
    Pair p;
    Doomed d(*p.b.pd, kAll);
    ASSERT_TRUE(d.mr);
    d.take(GetParam());
    Sge s = p.a.sge(0, 6000);
    SendWr wr;
    wr.wr_id = 11;
    wr.opcode = WrOpcode::rdma_read;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    wr.remote_addr = d.addr();
    wr.rkey = d.mr->rkey();
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    auto sc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(p.b.counters().resp_memory_faults, 1u);
    EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);
  }
}

INSTANTIATE_TEST_SUITE_P(Gone, VanishedMemory, ::testing::Values(Gone::unmapped, Gone::read_only, Gone::no_access),
                         [](const ::testing::TestParamInfo<Gone>& i) {
                           return i.param == Gone::unmapped    ? std::string("Unmapped")
                                  : i.param == Gone::read_only ? std::string("ReadOnly")
                                                               : std::string("NoAccess");
                         });

}  // namespace
}  // namespace uroce::test
