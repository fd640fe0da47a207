// uroce::MemoryRegion: registration, keys, and the NIC enforcing them.
#include <sys/mman.h>
#include <unistd.h>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

struct One {
  One() {
    ctx = must(Context::open(local_device("127.0.0.1")), "open");
    pd = must(ctx->alloc_pd(), "alloc_pd");
  }
  std::optional<Context> ctx;
  std::optional<ProtectionDomain> pd;
};

TEST(MemoryRegion, DescribesTheRegisteredMemory) {
  One o;
  std::vector<std::byte> buf(10000);
  auto mr = must(o.pd->reg_mr(buf.data(), buf.size(), kAllAccess), "reg_mr");
  EXPECT_EQ(mr.data(), buf.data());
  EXPECT_EQ(mr.addr(), uint64_t(reinterpret_cast<uintptr_t>(buf.data())));
  EXPECT_EQ(mr.length(), buf.size());
  EXPECT_EQ(mr.access(), kAllAccess);
  EXPECT_EQ(mr.bytes().size(), buf.size());
  EXPECT_NE(mr.lkey(), mr.rkey());
  const Sge s = mr.sge(16, 32);
  EXPECT_EQ(s.addr, mr.addr() + 16);
  EXPECT_EQ(s.length, 32u);
  EXPECT_EQ(s.lkey, mr.lkey());
  const Sge all = mr.sge();
  EXPECT_EQ(all.addr, mr.addr());
  EXPECT_EQ(all.length, 10000u);
}

TEST(MemoryRegion, KeysAreDistinctAndNotReusedAfterDeregistration) {
  One o;
  std::vector<std::byte> buf(4096);
  std::vector<uint32_t> keys;
  for (int i = 0; i < 4; ++i) {
    auto mr = must(o.pd->reg_mr(std::span<std::byte>(buf), kAllAccess), "reg_mr");
    keys.push_back(mr.lkey());
    keys.push_back(mr.rkey());
  }  // each one deregistered before the next: its table slot is reused
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

TEST(MemoryRegion, UnknownAccessBitsAreEinval) {
  One o;
  std::vector<std::byte> buf(64);
  auto mr = o.pd->reg_mr(std::span<std::byte>(buf), 1u << 30);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), EINVAL);
}

TEST(MemoryRegion, RemoteWriteNeedsLocalWrite) {
  One o;
  std::vector<std::byte> buf(64);
  auto mr = o.pd->reg_mr(std::span<std::byte>(buf), access::kRemoteWrite);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), EINVAL);
  EXPECT_NE(mr.status().message().find("LOCAL_WRITE"), std::string_view::npos);
  mr = o.pd->reg_mr(std::span<std::byte>(buf), access::kRemoteAtomic);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), EINVAL);
}

TEST(MemoryRegion, UnmappedMemoryIsEfault) {
  One o;
  const long page = ::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, size_t(page) * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(::munmap(static_cast<char*>(p) + page, size_t(page)), 0);  // second page gone
  auto mr = o.pd->reg_mr(p, size_t(page) * 2, access::kLocalWrite);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), EFAULT);
  EXPECT_NE(mr.status().message().find("not mapped"), std::string_view::npos);
  {
    auto ok = o.pd->reg_mr(p, size_t(page), access::kLocalWrite);  // the first page is fine
    EXPECT_TRUE(ok.ok()) << ok.status().to_string();
  }
  ::munmap(p, size_t(page));
}

TEST(MemoryRegion, MovedRegionStillServesThePeer) {
  Pair p;
  MemoryRegion moved = std::move(*p.b.mr);
  p.b.mr.reset();
  fill(std::span<std::byte>(p.a.buf).first(4096), 7);
  Sge s = p.a.sge(0, 4096);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, moved.addr(), moved.rkey())), "post");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(p.a.at(0), moved.data(), 4096), 0);
}

TEST(MemoryRegion, DeregisteredRkeyIsRefusedByThePeer) {
  Pair p;
  uint64_t addr;
  uint32_t rkey;
  {
    auto tmp = must(p.b.pd->reg_mr(std::span<std::byte>(p.b.buf), kAllAccess), "reg_mr");
    addr = tmp.addr();
    rkey = tmp.rkey();
  }  // deregistered
  Sge s = p.a.sge(0, 64);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, addr, rkey, 9)), "post");
  const Wc wc = wait_wc(*p.a.scq);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, WcStatus::rem_access_err) << to_string(wc.status);
  EXPECT_EQ(p.a.qp->state(), QpState::err);
  EXPECT_EQ(p.b.buf[0], std::byte{0});
}

TEST(MemoryRegion, AccessRightsAreEnforcedRemotely) {
  PairOptions o;
  o.access = access::kLocalWrite | access::kRemoteRead;  // B may be read, not written
  Pair p(o);
  fill(std::span<std::byte>(p.b.buf).first(256), 3);
  Sge s = p.a.sge(0, 256);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_read, s, p.b.addr(), p.b.mr->rkey())), "read");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 256), 0);

  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(1024), p.b.mr->rkey())), "write");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::rem_access_err);
  EXPECT_EQ(p.b.buf[1024], std::byte{0});
}

TEST(MemoryRegion, BoundsAreEnforcedRemotely) {
  Pair p;
  Sge s = p.a.sge(0, 128);
  // 64 bytes inside the end of B's region, 64 beyond.
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(p.b.buf.size() - 64), p.b.mr->rkey())), "write");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::rem_access_err);
}

TEST(MemoryRegion, LocalKeyOutsideTheRegionIsALocalProtectionError) {
  Pair p;
  Sge s = p.a.sge(p.a.buf.size() - 8, 64);  // runs past the end of A's region
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey())), "write");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::loc_prot_err);
}

}  // namespace
}  // namespace uroce::apitest
