// Many RC QPs writing to one peer whose receive queue holds 128 packets (a
// FakeNetwork queue limit, as a socket buffer): with the path shared, the
// QPs together keep under what the queue takes once the first losses came,
// every WRITE completes and lands byte for byte; without it each QP keeps
// its own least window and the queue overflows all along.
#include "fake_wire.hpp"

namespace uroce::test {
namespace {

constexpr int kQps = 16;
constexpr int kWritesPerQp = 32;
constexpr uint32_t kWriteBytes = 32 * 1024;  // 32 packets at MTU 1024

struct Outcome {
  uint64_t overflow = 0;  // of the second round
  uint64_t retransmits = 0;
  Counters a;  // at the end
};

// Loss-based windows (UROCE_CC=dcqcn: the fake wire's peer is not on this
// host, where swift would follow the round trip instead).  Two rounds of
// WRITEs: the first begins with every QP's whole window at once, most of
// it lost whatever the windows do next; the second shows how they do.
Outcome run(bool share) {
  Outcome out;
  transport::CongestionConfig cc;
  cc.mode = transport::CcMode::dcqcn;
  cc.share_paths = share;
  PairOptions o;
  o.congestion = cc;
  o.buf_size = size_t(kQps) * kWriteBytes * 2;
  o.max_send_wr = kWritesPerQp;
  o.cqe = 1024;
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_queue_limit(128);
  std::vector<std::unique_ptr<Qp>> qa, qb;
  std::vector<Qp*> senders{p.a.qp.get()};
  for (int i = 1; i < kQps; ++i) {
    qa.push_back(p.create_qp(p.a));
    qb.push_back(p.create_qp(p.b));
    p.connect_qp(*qa.back(), *qb.back(), p.b, 0x100, 0x200);
    p.connect_qp(*qb.back(), *qa.back(), p.a, 0x200, 0x100);
    senders.push_back(qa.back().get());
  }
  // QP q writes its own 32 KiB of A's first half to its own place in B's
  // buffer, kWritesPerQp times a round.
  std::vector<Sge> sges;
  for (int q = 0; q < kQps; ++q) sges.push_back(p.a.sge(size_t(q) * kWriteBytes, kWriteBytes));
  uint64_t overflow0 = 0, retransmits0 = 0;
  for (uint32_t round = 1; round <= 2; ++round) {
    fill_pattern(p.a.buf.data(), size_t(kQps) * kWriteBytes, 20 + round);
    for (int k = 0; k < kWritesPerQp; ++k)
      for (int q = 0; q < kQps; ++q) {
        const uint64_t dst = p.b.addr(o.buf_size / 2 + size_t(q) * kWriteBytes);
        const Status s = post_send(
            *senders[q], make_wr(uint64_t(q) << 8 | uint64_t(k), WrOpcode::rdma_write, &sges[q], dst, p.b.mr->rkey()));
        EXPECT_TRUE(s.ok()) << s.to_string();
      }
    const auto wcs = poll_n(*p.a.scq, size_t(kQps) * kWritesPerQp, 30000);
    EXPECT_EQ(wcs.size(), size_t(kQps) * kWritesPerQp) << "round " << round;
    std::vector<int> done(kQps, 0);
    for (const Wc& wc : wcs) {
      EXPECT_EQ(wc.status, WcStatus::success) << to_string(wc.status);
      EXPECT_EQ(wc.opcode, WcOpcode::rdma_write);
      const uint64_t q = wc.wr_id >> 8, k = wc.wr_id & 0xff;
      if (q >= uint64_t(kQps)) {
        ADD_FAILURE() << "wr_id " << wc.wr_id;
        continue;
      }
      EXPECT_EQ(k, uint64_t(done[q])) << "QP " << q << " completed out of order";
      ++done[q];
    }
    for (int q = 0; q < kQps; ++q) EXPECT_EQ(done[q], kWritesPerQp) << "QP " << q << ", round " << round;
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + o.buf_size / 2, size_t(kQps) * kWriteBytes), -1)
        << "round " << round;
    if (round == 1) {
      overflow0 = f.net->stats().overflow;
      retransmits0 = p.a.counters().req_retransmits;
    }
  }
  out.a = p.a.counters();
  out.overflow = f.net->stats().overflow - overflow0;
  out.retransmits = out.a.req_retransmits - retransmits0;
  return out;
}

TEST(PathShareWire, QpsSharingAPathKeepUnderTheQueueAndEveryByteLands) {
  const Outcome shared = run(true);
  if (HasFailure()) return;
  const Outcome own = run(false);
  if (HasFailure()) return;
  EXPECT_GT(shared.a.path_cuts, 0u);
  EXPECT_GT(shared.a.path_waits, 0u);
  EXPECT_EQ(own.a.path_cuts, 0u);
  EXPECT_EQ(own.a.path_waits, 0u);
  // The second round: the QPs' least windows add up past the queue (16 of
  // 16 packets: 256), the shared window keeps under it.  Measured: 26 to
  // 76 times fewer drops.
  EXPECT_GT(own.overflow, 0u);
  EXPECT_LT(shared.overflow * 4, own.overflow)
      << "drops with the path shared " << shared.overflow << ", without " << own.overflow;
  EXPECT_LT(shared.retransmits * 4, own.retransmits)
      << "resends with the path shared " << shared.retransmits << ", without " << own.retransmits;
}

// QPs destroyed with packets in flight, and QPs failed, give their share
// back: the others, held by a window their packets filled, complete.
TEST(PathShareWire, QpsDestroyedOrFailedMidTransferLeaveTheirShare) {
  transport::CongestionConfig cc;
  cc.mode = transport::CcMode::dcqcn;
  PairOptions o;
  o.congestion = cc;
  o.buf_size = 4 << 20;
  o.cqe = 1024;
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_queue_limit(64);
  std::vector<std::unique_ptr<Qp>> qa, qb;
  for (int i = 0; i < kQps; ++i) {
    qa.push_back(p.create_qp(p.a));
    qb.push_back(p.create_qp(p.b));
    p.connect_qp(*qa.back(), *qb.back(), p.b, 0x300, 0x400);
    p.connect_qp(*qb.back(), *qa.back(), p.a, 0x400, 0x300);
  }
  fill_pattern(p.a.buf.data(), 1 << 20, 9);
  Sge sge = p.a.sge(0, 256 * 1024);
  auto post_all = [&](int from, int to, uint64_t round) {
    for (int q = from; q < to; ++q)
      for (uint64_t k = 0; k < 4; ++k)
        ASSERT_TRUE(post_send(*qa[q], make_wr(round << 16 | uint64_t(q) << 8 | k, WrOpcode::rdma_write, &sge,
                                              p.b.addr((2 << 20) + size_t(q) * 65536), p.b.mr->rkey()))
                        .ok());
  };
  // Round 1 fills the path and draws losses; then half the QPs go, some
  // destroyed, some moved to ERR, while their packets are in flight.
  post_all(0, kQps, 1);
  ASSERT_TRUE(wait_until([&] { return p.a.counters().path_cuts > 0; }, 10000)) << "the path was never limited";
  for (int q = 0; q < kQps / 4; ++q) qa[q].reset();
  for (int q = kQps / 4; q < kQps / 2; ++q) {
    QpAttr attr;
    attr.qp_state = QpState::err;
    ASSERT_TRUE(qa[q]->modify(attr, qp_attr_mask::kState).ok());
  }
  // The rest complete round 1 and a round 2 posted now.
  post_all(kQps / 2, kQps, 2);
  std::vector<int> done(kQps, 0);
  const size_t want = size_t(kQps / 2) * 8;
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got < want && std::chrono::steady_clock::now() < deadline) {
    for (const Wc& wc : drain(*p.a.scq, 1)) {
      const int q = int((wc.wr_id >> 8) & 0xff);
      if (q < kQps / 2) continue;  // (the QPs that went: flushed or done before)
      EXPECT_EQ(wc.status, WcStatus::success) << to_string(wc.status) << " on QP " << q;
      ++done[q];
      ++got;
    }
  }
  EXPECT_EQ(got, want) << "the QPs left were held by the share of the QPs gone";
  for (int q = kQps / 2; q < kQps; ++q) EXPECT_EQ(done[q], 8) << "QP " << q;
}

// A path lives while QPs send to its peer: the last QP gone (destroyed,
// or reset) takes it out of the NIC's table, so a server that many
// short-lived clients came and went keeps none; a QP connected later
// starts a fresh one.
TEST(PathShareWire, ThePathGoesWithItsLastQp) {
  transport::CongestionConfig cc;
  cc.mode = transport::CcMode::dcqcn;
  PairOptions o;
  o.congestion = cc;
  Fake f(o);
  Pair& p = *f.p;
  auto paths = [&] {
    std::lock_guard g(p.a.ctx->nic().mu());
    return p.a.ctx->nic().paths().size();
  };
  ASSERT_EQ(paths(), 1u);
  std::vector<std::unique_ptr<Qp>> qa, qb;
  for (int i = 0; i < 3; ++i) {
    qa.push_back(p.create_qp(p.a));
    qb.push_back(p.create_qp(p.b));
    p.connect_qp(*qa.back(), *qb.back(), p.b, 0x500, 0x600);
    p.connect_qp(*qb.back(), *qa.back(), p.a, 0x600, 0x500);
  }
  EXPECT_EQ(paths(), 1u) << "one peer endpoint, one path";
  qa[0].reset();
  QpAttr reset;
  reset.qp_state = QpState::reset;
  ASSERT_TRUE(qa[1]->modify(reset, qp_attr_mask::kState).ok());
  p.a.qp.reset();
  EXPECT_EQ(paths(), 1u) << "a QP still sends there";
  qa[2].reset();
  EXPECT_EQ(paths(), 0u);
  // Connected again, the reset QP binds a new path and moves data on it.
  qb[1] = p.create_qp(p.b);
  p.connect_qp(*qa[1], *qb[1], p.b, 0x700, 0x800);
  p.connect_qp(*qb[1], *qa[1], p.a, 0x800, 0x700);
  EXPECT_EQ(paths(), 1u);
  fill_pattern(p.a.buf.data(), 4096, 3);
  Sge sge = p.a.sge(0, 4096);
  ASSERT_TRUE(post_send(*qa[1], make_wr(1, WrOpcode::rdma_write, &sge, p.b.addr(8192), p.b.mr->rkey())).ok());
  const auto wcs = poll_n(*p.a.scq, 1, 10000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::success);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 8192, 4096), -1);
  qa[1].reset();
  EXPECT_EQ(paths(), 0u);
}

TEST(PathShareWire, OneQpAloneKeepsItsOwnWindowOnly) {
  transport::CongestionConfig cc;
  cc.mode = transport::CcMode::dcqcn;
  PairOptions o;
  o.congestion = cc;
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_queue_limit(24);
  fill_pattern(p.a.buf.data(), 256 * 1024, 5);
  Sge sge = p.a.sge(0, 256 * 1024);
  for (uint64_t k = 0; k < 4; ++k)
    ASSERT_TRUE(post_send(*p.a.qp, make_wr(k, WrOpcode::rdma_write, &sge, p.b.addr(512 * 1024), p.b.mr->rkey())).ok());
  const auto wcs = poll_n(*p.a.scq, 4, 30000);
  ASSERT_EQ(wcs.size(), 4u);
  for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::success) << to_string(wc.status);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 512 * 1024, 256 * 1024), -1);
  const Counters c = p.a.counters();
  EXPECT_GT(f.net->stats().overflow, 0u) << "the queue never overflowed: the test tests nothing";
  EXPECT_EQ(c.path_cuts, 0u);
  EXPECT_EQ(c.path_waits, 0u);
}

}  // namespace
}  // namespace uroce::test
