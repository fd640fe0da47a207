// Registered memory that the application unmapped or re-protected while it
// was registered (issue 11, rows 2 and 3): a NIC would keep the pinned
// pages; uroce pins nothing, and must neither crash nor move a byte
// elsewhere -- nor reach what is mapped at the address next.  Unmapped
// pages are noticed through userfaultfd where the kernel allows it (the
// region is then refused outright: resp_unmapped_regions), else by the
// fault guard at the access (resp_memory_faults).
// Each access becomes the error completion a failed access gets: a peer's
// WRITE or atomic REM_ACCESS_ERR (the responder's QP in ERR, IBA class C),
// a SEND into such a receive buffer LOC_PROT_ERR at the receiver and
// REM_OP_ERR at the sender, a gather from such memory LOC_PROT_ERR.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "common/fault_guard.hpp"
#include "loopback.hpp"
#include "support/fault_skip.hpp"
#include "verbs/unmap_watch.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
const size_t kPage = size_t(::sysconf(_SC_PAGESIZE));

// Two pages of B's, registered, then taken away as `how` says.
enum class Gone { unmapped, read_only, no_access };
struct Doomed {
  uint8_t* p;
  bool mapped = true;  // p is ours to unmap (once unmapped, another thread may map there)
  std::unique_ptr<Mr> mr;
  Doomed(Pd& pd, uint32_t acc) {
    p = static_cast<uint8_t*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) std::abort();
    std::memset(p, 0x5c, 2 * kPage);
    mr = reg_mr(pd, p, 2 * kPage, acc);
  }
  void take(Gone how) {
    if (how == Gone::unmapped) {
      ASSERT_EQ(::munmap(p, 2 * kPage), 0);
      mapped = false;
      ASSERT_TRUE(noticed()) << "a watched region was not marked gone";
    } else {
      ASSERT_EQ(::mprotect(p, 2 * kPage, how == Gone::read_only ? PROT_READ : PROT_NONE), 0);
    }
  }
  // munmap returns once the watch read the event; its thread marks the
  // region a moment later.
  bool noticed() const {
    if (!mr->watched()) return true;
    for (int i = 0; i < 1000 && !mr->gone(); ++i) ::usleep(1000);
    return mr->gone();
  }
  // Unmaps the region and maps new memory full of `fill` at its address;
  // false when another thread of this process (the NICs', a sanitizer's
  // allocator) took the address in between.
  bool replace(uint8_t fill) {
    if (::munmap(p, 2 * kPage) != 0) return false;
    mapped = false;
    void* q = ::mmap(p, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (q == MAP_FAILED) return false;
    if (q != static_cast<void*>(p)) {
      ::munmap(q, 2 * kPage);  // a kernel without MAP_FIXED_NOREPLACE placed it elsewhere
      return false;
    }
    mapped = true;
    std::memset(p, fill, 2 * kPage);
    return true;
  }
  // The counter the refusal of an access to the region raised.
  uint64_t refusals(const Counters& c, Gone how) const {
    return how == Gone::unmapped && mr->watched() ? c.resp_unmapped_regions : c.resp_memory_faults;
  }
  ~Doomed() {
    mr.reset();
    if (mapped) ::munmap(p, 2 * kPage);
  }
  uint64_t addr() const { return uint64_t(uintptr_t(p)); }
};

// A watched region of `pd` whose memory was unmapped and replaced by new
// memory full of `fill` at the same address, the watch having marked the
// region gone; null if the region was not registered or not watched, if
// the watch did not mark it, or if the address was taken 50 times in a row.
std::unique_ptr<Doomed> replaced(Pd& pd, uint32_t acc, uint8_t fill) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto d = std::make_unique<Doomed>(pd, acc);
    if (!d->mr || !d->mr->watched()) return nullptr;
    if (d->replace(fill)) return d->noticed() ? std::move(d) : nullptr;
  }
  return nullptr;
}

class VanishedMemory : public ::testing::TestWithParam<Gone> {
 protected:
  void SetUp() override { SKIP_WHERE_FAULTS_ARE_NOT_GUARDED(); }
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
    EXPECT_EQ(d.refusals(p.b.counters(), GetParam()), 1u);
    if (GetParam() != Gone::unmapped || !d.mr->watched()) {
      EXPECT_GT(fault_guard::recovered(), recovered);
    }
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
    EXPECT_EQ(d.refusals(p.b.counters(), GetParam()), 1u);
    EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);
  }
}

// Row 3: the application unmaps a registered buffer and something else is
// mapped at the same address.  A NIC would still reach the old, pinned
// pages; uroce, which cannot, refuses the region: a peer's READ through
// the old rkey never returns the new mapping's bytes, its WRITE never
// lands there, and a local SEND from it fails.
TEST(RemappedMemory, OldKeysNeverReachTheNewMapping) {
  if (!verbs::UnmapWatch::instance().available())
    GTEST_SKIP() << "no userfaultfd here: only the fault guard protects unmapped regions";
  Pair p;
  // The region goes away; new memory holding a secret takes its address.
  auto dp = replaced(*p.b.pd, kAll, 0xe7);
  ASSERT_TRUE(dp) << "no region was replaced (and marked gone)";
  Doomed& d = *dp;
  uint8_t* into = p.a.buf.data();
  std::memset(into, 0, 6000);
  Sge s = p.a.sge(0, 6000);
  SendWr wr;
  wr.wr_id = 31;
  wr.opcode = WrOpcode::rdma_read;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.remote_addr = d.addr();
  wr.rkey = d.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::rem_access_err);
  for (size_t i = 0; i < 6000; ++i) ASSERT_EQ(into[i], 0) << "byte " << i << " of the new mapping was read";
  EXPECT_EQ(p.b.counters().resp_unmapped_regions, 1u);
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);

  // (Pairs of one test share their NICs: the counters go on from above.)
  Pair q;
  const uint64_t before = q.b.counters().resp_unmapped_regions;
  auto d2p = replaced(*q.b.pd, kAll, 0xe7);
  ASSERT_TRUE(d2p);
  Doomed& d2 = *d2p;
  Sge w = q.a.sge(0, 3000);
  wr.wr_id = 32;
  wr.opcode = WrOpcode::rdma_write;
  wr.sg_list = {&w, 1};
  wr.remote_addr = d2.addr() + 100;
  wr.rkey = d2.mr->rkey();
  ASSERT_TRUE(post_send(*q.a.qp, wr).ok());
  auto wc = poll_n(*q.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::rem_access_err);
  for (size_t i = 0; i < 2 * kPage; ++i) ASSERT_EQ(d2.p[i], 0xe7) << "byte " << i << " of the new mapping written";
  EXPECT_EQ(q.b.counters().resp_unmapped_regions, before + 1);

  // A SEND from the re-mapped local buffer (zero copy, one SGE).
  Pair r;
  auto l2p = replaced(*r.a.pd, access::kLocalWrite, 0xe7);
  ASSERT_TRUE(l2p);
  Doomed& l2 = *l2p;
  ASSERT_TRUE(post_recv(*r.b.qp, 1, {r.b.sge(0, 8192)}).ok());
  Sge ls{l2.addr(), 5000, l2.mr->lkey()};
  wr.wr_id = 33;
  wr.opcode = WrOpcode::send;
  wr.sg_list = {&ls, 1};
  ASSERT_TRUE(post_send(*r.a.qp, wr).ok());
  auto lc = poll_n(*r.a.scq, 1);
  ASSERT_EQ(lc.size(), 1u);
  EXPECT_EQ(lc[0].status, WcStatus::loc_prot_err);
}

// A region deregistered before its memory is unmapped: the watch lets go of
// the pages (munmap does not wait on uroce), and a region registered again
// over new memory at the same address works.
TEST(RemappedMemory, DeregisteredThenUnmappedThenRegisteredAgainWorks) {
  if (!verbs::UnmapWatch::instance().available()) GTEST_SKIP() << "no userfaultfd here";
  Pair p;
  // Between the munmap and the mmap another thread of this process (the
  // NICs' threads, a sanitizer's allocator) may take the freed address; then
  // the whole sequence starts again over a new mapping.
  uint8_t* m = nullptr;
  for (int attempt = 0; attempt < 50 && m == nullptr; ++attempt) {
    void* fresh = ::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(fresh, MAP_FAILED);
    auto first = reg_mr(*p.b.pd, fresh, 2 * kPage, kAll);
    ASSERT_TRUE(first && first->watched());
    first.reset();
    ASSERT_EQ(::munmap(fresh, 2 * kPage), 0);
    void* again =
        ::mmap(fresh, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (again == fresh) {
      m = static_cast<uint8_t*>(again);
    } else if (again != MAP_FAILED) {
      ::munmap(again, 2 * kPage);  // a kernel without MAP_FIXED_NOREPLACE placed it elsewhere
    } else {
      ASSERT_EQ(errno, EEXIST) << "mmap at the freed address";
    }
  }
  ASSERT_NE(m, nullptr) << "the freed address was taken 50 times in a row";
  std::memset(m, 0x3c, 2 * kPage);
  auto again = reg_mr(*p.b.pd, m, 2 * kPage, kAll);
  ASSERT_TRUE(again);
  ::usleep(20000);  // an UNMAP event, had one been queued, would have been handled
  EXPECT_FALSE(again->gone());
  Sge s = p.a.sge(0, 4000);
  SendWr wr;
  wr.wr_id = 41;
  wr.opcode = WrOpcode::rdma_read;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.remote_addr = uint64_t(uintptr_t(m));
  wr.rkey = again->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(p.a.buf[0], 0x3c);
  EXPECT_EQ(p.a.buf[3999], 0x3c);
  again.reset();
  ::munmap(m, 2 * kPage);
}

INSTANTIATE_TEST_SUITE_P(Gone, VanishedMemory, ::testing::Values(Gone::unmapped, Gone::read_only, Gone::no_access),
                         [](const ::testing::TestParamInfo<Gone>& i) {
                           return i.param == Gone::unmapped    ? std::string("Unmapped")
                                  : i.param == Gone::read_only ? std::string("ReadOnly")
                                                               : std::string("NoAccess");
                         });

}  // namespace
}  // namespace uroce::test
