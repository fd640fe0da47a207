// RC over a misbehaving FakeNetwork: every packet duplicated, packets
// reordered, pseudo-random loss in both directions under mixed traffic;
// corrupted packets between same-host peers.  Everything takes effect
// exactly once and the data is exact.
#include "fake_wire.hpp"

namespace uroce::test {
namespace {

TEST(RcLossyNetwork, DuplicatedPacketsTakeEffectOnce) {
  PairOptions o;
  o.wrap = dup_wrap();
  Fake f(o);
  Pair& p = *f.p;
  auto* target = reinterpret_cast<uint64_t*>(p.b.buf.data() + (512 << 10));
  *target = 1000;
  fill_pattern(p.a.buf.data(), 300000, 6);
  fill_pattern(p.b.buf.data() + 300000, 100000, 7);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 70 + i, {p.b.sge(400000 + i * 10000, 10000)}).ok());
  Sge s_send = p.a.sge(0, 5000), s_write = p.a.sge(10000, 200000), s_read = p.a.sge(600000, 100000);
  Sge s_atomic = p.a.sge(800000, 8);
  std::vector<SendWr> wrs;
  wrs.push_back(make_wr(1, WrOpcode::send, &s_send));
  wrs.push_back(make_wr(2, WrOpcode::rdma_write, &s_write, p.b.addr(100000), p.b.mr->rkey()));
  wrs.push_back(make_wr(3, WrOpcode::rdma_read, &s_read, p.b.addr(300000), p.b.mr->rkey()));
  wrs.push_back(make_wr(4, WrOpcode::atomic_fetch_and_add, &s_atomic, p.b.addr(512 << 10), p.b.mr->rkey()));
  wrs.back().compare_add = 1;
  wrs.push_back(make_wr(5, WrOpcode::send, &s_send));
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 5);
  ASSERT_EQ(sc.size(), 5u);
  const WcOpcode want[5] = {WcOpcode::send, WcOpcode::rdma_write, WcOpcode::rdma_read, WcOpcode::fetch_add,
                            WcOpcode::send};
  const uint32_t want_len[5] = {5000, 200000, 100000, 8, 5000};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sc[i].status, WcStatus::success) << i << ": " << to_string(sc[i].status);
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].opcode, want[i]);
    EXPECT_EQ(sc[i].byte_len, want_len[i]);
  }
  auto rc = poll_n(*p.b.rcq, 2);
  ASSERT_EQ(rc.size(), 2u);
  EXPECT_EQ(rc[0].wr_id, 70u);
  EXPECT_EQ(rc[1].wr_id, 71u);
  EXPECT_EQ(rc[0].byte_len, 5000u);
  EXPECT_TRUE(drain(*p.b.rcq, 10).empty()) << "a duplicated SEND consumed a receive";
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 400000, 5000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 410000, 5000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 10000, p.b.buf.data() + 100000, 200000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 600000, p.b.buf.data() + 300000, 100000), -1);
  uint64_t orig;
  std::memcpy(&orig, p.a.buf.data() + 800000, 8);
  EXPECT_EQ(orig, 1000u);
  EXPECT_EQ(*target, 1001u);
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_GT(cb.resp_duplicates, 0u);
  EXPECT_EQ(cb.resp_dup_atomics, 1u);
  EXPECT_GT(ca.req_stale_responses, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

// The packets of a message arrive in reverse order.
TEST(RcLossyNetwork, ReorderedPacketsAreRecovered) {
  Fake f(go_back_n());
  Pair& p = *f.p;
  ASSERT_NO_FATAL_FAILURE(send_reversed(f));
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.resp_seq_naks_sent, 1u);
  EXPECT_EQ(cb.resp_future_psn, 5u);  // packets 6..2 came before 1
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  EXPECT_EQ(ca.req_retransmits, 6u);  // the NAK names PSN 1: 1..6 again
  EXPECT_EQ(cb.resp_duplicates, 1u);  // the resent 1 (the reordered one arrived last)
}

// A pseudo-random (fixed seed) 6% loss in both directions under a mix of
// operations.  (A strictly periodic loss can starve go-back-N for good when
// the resent window is a multiple of the period; that is the network, not
// the protocol.)
TEST(RcLossyNetwork, SteadyLossUnderMixedTraffic) {
  PairOptions o;
  o.timeout = 10;
  o.mtu = Mtu::m512;
  Fake f(o);
  Pair& p = *f.p;
  auto rng = std::make_shared<uint64_t>(12345);
  f.drop_if([=](const WirePkt&) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (*rng >> 33) % 100 < 6;
  });
  auto* counter = reinterpret_cast<uint64_t*>(p.b.buf.data() + 1000000);
  *counter = 0;
  fill_pattern(p.a.buf.data(), 400000, 9);
  fill_pattern(p.b.buf.data() + 500000, 400000, 10);
  constexpr int kRounds = 12;
  for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 100 + i, {p.b.sge(i * 8000, 8000)}).ok());
  std::vector<Sge> sges;
  sges.reserve(4 * kRounds);
  std::vector<SendWr> wrs;
  for (int i = 0; i < kRounds; ++i) {
    sges.push_back(p.a.sge(i * 8000, 3000 + i * 300));
    wrs.push_back(make_wr(4 * i, WrOpcode::send, &sges.back()));
    sges.push_back(p.a.sge(100000 + i * 20000, 20000));
    wrs.push_back(make_wr(4 * i + 1, WrOpcode::rdma_write, &sges.back(), p.b.addr(200000 + i * 20000), p.b.mr->rkey()));
    sges.push_back(p.a.sge(500000 + i * 30000, 30000));
    wrs.push_back(make_wr(4 * i + 2, WrOpcode::rdma_read, &sges.back(), p.b.addr(500000 + i * 30000), p.b.mr->rkey()));
    sges.push_back(p.a.sge(900000 + i * 8, 8));
    wrs.push_back(make_wr(4 * i + 3, WrOpcode::atomic_fetch_and_add, &sges.back(), p.b.addr(1000000), p.b.mr->rkey()));
    wrs.back().compare_add = 1;
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, wrs.size(), 20000);
  ASSERT_EQ(sc.size(), wrs.size());
  std::vector<bool> seen(kRounds, false);
  for (size_t i = 0; i < sc.size(); ++i) {
    ASSERT_EQ(sc[i].status, WcStatus::success) << i << ": " << to_string(sc[i].status);
    EXPECT_EQ(sc[i].wr_id, i);
    EXPECT_EQ(sc[i].byte_len, wrs[i].sg_list[0].length);
    if (i % 4 == 3) {
      uint64_t v;
      std::memcpy(&v, p.a.buf.data() + 900000 + (i / 4) * 8, 8);
      ASSERT_LT(v, uint64_t(kRounds));
      EXPECT_FALSE(seen[v]) << "original value " << v << " returned twice";
      seen[v] = true;
    }
  }
  EXPECT_EQ(*counter, uint64_t(kRounds));
  auto rc = poll_n(*p.b.rcq, kRounds);
  ASSERT_EQ(rc.size(), size_t(kRounds));
  for (int i = 0; i < kRounds; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(rc[i].byte_len, uint32_t(3000 + i * 300));
  }
  for (int i = 0; i < kRounds; ++i)
    EXPECT_EQ(first_diff(p.a.buf.data() + i * 8000, p.b.buf.data() + i * 8000, 3000 + i * 300), -1) << i;
  EXPECT_EQ(first_diff(p.a.buf.data() + 100000, p.b.buf.data() + 200000, kRounds * 20000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 500000, p.b.buf.data() + 500000, kRounds * 30000), -1);
  EXPECT_GT(p.a.counters().req_retransmits, 0u);
}

// Between same-host peers the ring packets carry no ICRC
// (net::kRingTakesNoIcrc): a byte flipped on the way in (a fault injector
// between ring and NIC) still makes the packet fail its ICRC, as on a wire,
// and it is resent.  Without faults, every byte arrives through the ring.
TEST(RcLossyNetwork, CorruptedRingPacketsFailTheirIcrcAndAreResent) {
  for (const double rate : {0.0, 0.05}) {
    SCOPED_TRACE(rate);
    PairOptions o = over(PacketPath::shm);
    o.timeout = 10;
    o.wrap_b = [rate](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
      FaultConfig fc;
      fc.seed = 21;
      fc.rx.corrupt = rate;
      return std::move(net::FaultIo::wrap(std::move(io), fc).value());
    };
    Pair p(o);
    constexpr uint32_t kLen = 200000;
    fill_pattern(p.a.buf.data(), kLen, 12);
    ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(kLen, 3000)}).ok());
    Sge s_write = p.a.sge(0, kLen), s_send = p.a.sge(0, 3000);
    std::vector<SendWr> wrs;
    wrs.push_back(make_wr(1, WrOpcode::rdma_write, &s_write, p.b.addr(0), p.b.mr->rkey()));
    wrs.push_back(make_wr(2, WrOpcode::send, &s_send));
    size_t bad;
    ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
    auto sc = poll_n(*p.a.scq, 2, 20000);
    ASSERT_EQ(sc.size(), 2u);
    for (const auto& wc : sc) EXPECT_EQ(wc.status, WcStatus::success) << to_string(wc.status);
    auto rc = poll_n(*p.b.rcq, 1);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(rc[0].byte_len, 3000u);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), kLen), -1);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + kLen, 3000), -1);
    const Counters b = p.b.counters();
    EXPECT_GT(b.shm_rx_packets, 50u) << "the packets came through the ring";
    if (rate > 0) {  // (without faults a slow build may still time out and resend: nothing to count)
      EXPECT_GT(b.rx_icrc_bad, 0u);
      EXPECT_GT(p.a.counters().req_retransmits, 0u);
    }
  }
}

}  // namespace
}  // namespace uroce::test
