// Send flags and scatter/gather: unsignaled WRs, sq_sig_all, inline data,
// multi-SGE gather and scatter, immediate data, fence.
#include <arpa/inet.h>

#include "loopback.hpp"

namespace uroce::test {
namespace {

SendWr wr_of(uint64_t id, WrOpcode opc, std::span<const Sge> sges, uint32_t flags = send_flags::kSignaled) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = opc;
  wr.send_flags = flags;
  wr.sg_list = sges;
  return wr;
}

// An unsignaled WRITE produces no completion; the signaled READ behind it
// completes, in order, and reads what the WRITE wrote: proof of success.
TEST(RcFlags, UnsignaledWriteProvedBySignaledRead) {
  Pair p;
  fill_pattern(p.a.buf.data(), 3000, 1);
  Sge w = p.a.sge(0, 3000), r = p.a.sge(10000, 3000);
  SendWr wrs[2] = {wr_of(1, WrOpcode::rdma_write, {&w, 1}, 0), wr_of(2, WrOpcode::rdma_read, {&r, 1})};
  for (auto& x : wrs) {
    x.remote_addr = p.b.addr(5000);
    x.rkey = p.b.mr->rkey();
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 2u);
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_read);
  EXPECT_EQ(sc[0].byte_len, 3000u);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.a.buf.data() + 10000, 3000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 5000, 3000), -1);
  EXPECT_TRUE(drain(*p.a.scq, 20).empty()) << "the unsignaled WRITE completed";
}

// Unsignaled WQEs still free their send-queue slots: a 4-deep SQ carries 200
// WRs, one in four signaled.
TEST(RcFlags, UnsignaledWqesRetire) {
  PairOptions o;
  o.max_send_wr = 4;
  Pair p(o);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(post_recv(*p.b.qp, i, {p.b.sge(i * 16, 16)}).ok());
  Sge s = p.a.sge(0, 16);
  uint64_t id = 0;
  size_t recvs = 0;
  for (int round = 0; round < 50; ++round) {
    SendWr wrs[4];
    for (int k = 0; k < 4; ++k)
      wrs[k] = wr_of(id++, k == 1 ? WrOpcode::send : WrOpcode::rdma_write, {&s, 1}, k == 3 ? send_flags::kSignaled : 0);
    for (auto& x : wrs) {
      x.remote_addr = p.b.addr(8000);
      x.rkey = p.b.mr->rkey();
    }
    size_t bad = 0;
    Status st = p.a.qp->post_send(wrs, &bad);
    ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.to_string();
    auto sc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].wr_id, id - 1);
    EXPECT_EQ(sc[0].status, WcStatus::success);
    recvs += poll_n(*p.b.rcq, 1).size();
  }
  EXPECT_EQ(recvs, 50u);
  EXPECT_TRUE(drain(*p.a.scq, 5).empty());
}

TEST(RcFlags, SqSigAllSignalsEveryWr) {
  PairOptions o;
  o.sq_sig_all = true;
  Pair p(o);
  Sge s = p.a.sge(0, 100);
  SendWr wrs[3] = {wr_of(1, WrOpcode::rdma_write, {&s, 1}, 0), wr_of(2, WrOpcode::rdma_write, {&s, 1}, 0),
                   wr_of(3, WrOpcode::rdma_read, {&s, 1}, 0)};
  for (auto& x : wrs) {
    x.remote_addr = p.b.addr(0);
    x.rkey = p.b.mr->rkey();
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 3);
  ASSERT_EQ(sc.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].status, WcStatus::success);
    EXPECT_EQ(sc[i].opcode, i == 2 ? WcOpcode::rdma_read : WcOpcode::rdma_write);
  }
}

// Inline data is copied at post time.  The inline SEND and WRITE are held
// behind a fenced position (a READ is outstanding), so they leave the host
// only after the application changed (and here: freed) its buffer.  A bogus
// lkey is never looked at.
TEST(RcFlags, InlineDataIsCapturedAtPost) {
  Pair p;
  fill_pattern(p.b.buf.data() + 500000, 256 << 10, 2);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 1024)}).ok());
  Sge r = p.a.sge(0, 256 << 10);
  SendWr read = wr_of(1, WrOpcode::rdma_read, {&r, 1});
  read.remote_addr = p.b.addr(500000);
  read.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, read).ok());
  std::vector<uint8_t> heap(200);
  fill_pattern(heap.data(), 200, 3);
  const std::vector<uint8_t> want = heap;
  Sge in[2] = {{uint64_t(uintptr_t(heap.data())), 120, 0xdeadbeef}, {uint64_t(uintptr_t(heap.data() + 120)), 80, 0}};
  SendWr wrs[2] = {wr_of(2, WrOpcode::send, in, send_flags::kSignaled | send_flags::kInline | send_flags::kFence),
                   wr_of(3, WrOpcode::rdma_write, in, send_flags::kSignaled | send_flags::kInline)};
  wrs[1].remote_addr = p.b.addr(2000);
  wrs[1].rkey = p.b.mr->rkey();
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  std::fill(heap.begin(), heap.end(), 0xee);
  heap.clear();
  heap.shrink_to_fit();
  auto sc = poll_n(*p.a.scq, 3);
  ASSERT_EQ(sc.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].status, WcStatus::success) << to_string(sc[i].status);
  }
  EXPECT_EQ(sc[1].byte_len, 200u);
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].byte_len, 200u);
  EXPECT_EQ(first_diff(want.data(), p.b.buf.data(), 200), -1);
  EXPECT_EQ(first_diff(want.data(), p.b.buf.data() + 2000, 200), -1);
  // Above max_inline_data: refused at post time.
  std::vector<uint8_t> big(p.a.qp->query().cap.max_inline_data + 1);
  Sge b{uint64_t(uintptr_t(big.data())), uint32_t(big.size()), 0};
  SendWr too_big = wr_of(9, WrOpcode::send, {&b, 1}, send_flags::kInline);
  EXPECT_EQ(post_send(*p.a.qp, too_big).code(), EINVAL);
}

// 4 SGEs of uneven lengths on both sides; the SGE boundaries fall in the
// middle of packets (MTU 1024) and do not line up between the two lists.
TEST(RcFlags, MultiSgeGatherAndScatter) {
  Pair p;
  fill_pattern(p.a.buf.data(), 100000, 4);
  std::memset(p.b.buf.data(), 0x5a, 200000);
  const Sge src[4] = {p.a.sge(10, 100), p.a.sge(2000, 1500), p.a.sge(9000, 7), p.a.sge(20000, 2500)};
  const Sge dst[4] = {p.b.sge(100, 3000), p.b.sge(5000, 13), p.b.sge(7000, 900), p.b.sge(9000, 1000)};
  const uint32_t total = 100 + 1500 + 7 + 2500;
  std::vector<uint8_t> want;
  for (const Sge& s : src) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(s.addr);
    want.insert(want.end(), q, q + s.length);
  }
  auto gathered = [&](const Sge* list, uint32_t n) {
    std::vector<uint8_t> got;
    for (int i = 0; i < 4 && got.size() < n; ++i) {
      const uint8_t* q = reinterpret_cast<const uint8_t*>(list[i].addr);
      got.insert(got.end(), q, q + std::min<size_t>(list[i].length, n - got.size()));
    }
    return got;
  };
  RecvWr rwr{77, {dst, 4}};
  size_t bad;
  ASSERT_TRUE(p.b.qp->post_recv({&rwr, 1}, &bad).ok());
  ASSERT_TRUE(post_send(*p.a.qp, wr_of(1, WrOpcode::send, src)).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].byte_len, total);
  EXPECT_EQ(gathered(dst, total), want);
  EXPECT_EQ(p.b.buf[99], 0x5a);
  EXPECT_EQ(p.b.buf[3100], 0x5a);
  EXPECT_EQ(p.b.buf[5013], 0x5a);
  EXPECT_EQ(p.b.buf[7900], 0x5a);
  EXPECT_EQ(p.b.buf[9000 + total - 3000 - 13 - 900], 0x5a);  // the last SGE is only partly used
  // WRITE gathers the same list into one remote range; READ scatters a
  // remote range into four local pieces.
  SendWr w = wr_of(2, WrOpcode::rdma_write, src);
  w.remote_addr = p.b.addr(100000);
  w.rkey = p.b.mr->rkey();
  const Sge back[4] = {p.a.sge(50000, 1), p.a.sge(51000, 2047), p.a.sge(60000, 10), p.a.sge(70000, 2049)};
  SendWr r = wr_of(3, WrOpcode::rdma_read, back);
  r.remote_addr = p.b.addr(100000);
  r.rkey = p.b.mr->rkey();
  SendWr both[2] = {w, r};
  ASSERT_TRUE(p.a.qp->post_send(both, &bad).ok());
  auto sc = poll_n(*p.a.scq, 3);
  ASSERT_EQ(sc.size(), 3u);
  EXPECT_EQ(sc[1].byte_len, total);
  EXPECT_EQ(sc[2].byte_len, total);
  EXPECT_EQ(sc[2].status, WcStatus::success);
  EXPECT_EQ(first_diff(want.data(), p.b.buf.data() + 100000, total), -1);
  EXPECT_EQ(gathered(back, total), want);
}

TEST(RcFlags, ImmediateDataIsExact) {
  Pair p;
  fill_pattern(p.a.buf.data(), 5000, 5);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 10 + i, {p.b.sge(i * 8192, 8192)}).ok());
  Sge s = p.a.sge(0, 2500), none = p.a.sge(0, 0);
  SendWr wrs[3] = {wr_of(1, WrOpcode::send_with_imm, {&s, 1}), wr_of(2, WrOpcode::rdma_write_with_imm, {&s, 1}),
                   wr_of(3, WrOpcode::rdma_write_with_imm, {&none, 1})};
  wrs[0].imm_data = htonl(0x01020304);
  wrs[1].imm_data = htonl(0xfffefdfc);
  wrs[2].imm_data = 0;
  for (int i = 1; i < 3; ++i) {
    wrs[i].remote_addr = p.b.addr(100000);
    wrs[i].rkey = p.b.mr->rkey();
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 3);
  ASSERT_EQ(sc.size(), 3u);
  EXPECT_EQ(sc[0].opcode, WcOpcode::send);
  EXPECT_EQ(sc[1].opcode, WcOpcode::rdma_write);
  EXPECT_EQ(sc[2].opcode, WcOpcode::rdma_write);
  for (auto& wc : sc) EXPECT_EQ(wc.wc_flags, 0u);
  auto rc = poll_n(*p.b.rcq, 3);
  ASSERT_EQ(rc.size(), 3u);
  const WcOpcode want_op[3] = {WcOpcode::recv, WcOpcode::recv_rdma_with_imm, WcOpcode::recv_rdma_with_imm};
  const uint32_t want_len[3] = {2500, 2500, 0};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(rc[i].opcode, want_op[i]);
    EXPECT_EQ(rc[i].byte_len, want_len[i]);
    EXPECT_EQ(rc[i].wc_flags, wc_flags::kWithImm);
    EXPECT_EQ(rc[i].imm_data, wrs[i].imm_data);
    EXPECT_EQ(rc[i].src_qp, p.a.qp->qpn());
  }
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 2500), -1);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 100000, 2500), -1);
  EXPECT_EQ(p.b.buf[8192], 0) << "WRITE_WITH_IMM placed data in the receive buffer";
}

// A fenced SEND of the buffer a READ fills carries what the READ fetched.
TEST(RcFlags, FenceWaitsForPriorReads) {
  Pair p;
  const uint32_t len = 200000;
  fill_pattern(p.b.buf.data() + 300000, len, 6);
  ASSERT_TRUE(post_recv(*p.b.qp, 5, {p.b.sge(600000, len)}).ok());
  Sge local = p.a.sge(0, len);
  SendWr r = wr_of(1, WrOpcode::rdma_read, {&local, 1});
  r.remote_addr = p.b.addr(300000);
  r.rkey = p.b.mr->rkey();
  SendWr s = wr_of(2, WrOpcode::send, {&local, 1}, send_flags::kSignaled | send_flags::kFence);
  SendWr both[2] = {r, s};
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(both, &bad).ok());
  auto sc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[1].wr_id, 2u);
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].byte_len, len);
  EXPECT_EQ(first_diff(p.b.buf.data() + 300000, p.b.buf.data() + 600000, len), -1);
}

}  // namespace
}  // namespace uroce::test
