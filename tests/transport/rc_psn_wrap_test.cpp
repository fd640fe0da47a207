// PSNs are 24 bits and wrap: start both directions just below 2^24 and move
// multi-packet SENDs, WRITEs, READs and atomics across the wrap, with and
// without loss right at it.
#include <array>
#include <atomic>

#include "fake_wire.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kNearWrap = 0xfffff0;

SendWr wr_of(uint64_t id, WrOpcode opc, const Sge& sge, uint64_t raddr, uint32_t rkey) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = opc;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  wr.compare_add = 1;
  return wr;
}

// Runs `rounds` rounds of SEND (5 pkts), WRITE (7), READ (9), FETCH_ADD (1)
// from `s` to `d` at MTU 256 and checks every byte and completion.
void traffic(Side& s, Side& d, int rounds, uint32_t seed) {
  constexpr uint32_t kSend = 5 * 256 - 3, kWrite = 7 * 256, kRead = 8 * 256 + 1;
  auto* counter = reinterpret_cast<uint64_t*>(d.buf.data() + 900000);
  *counter = 0;
  fill_pattern(s.buf.data(), 400000, seed);
  fill_pattern(d.buf.data() + 500000, 300000, seed + 1);
  std::vector<Sge> sges;
  sges.reserve(4 * rounds);
  std::vector<SendWr> wrs;
  for (int i = 0; i < rounds; ++i) {
    ASSERT_TRUE(post_recv(*d.qp, 1000 + i, {d.sge(i * 2000, 2000)}).ok());
    sges.push_back(s.sge(i * 2000, kSend));
    wrs.push_back(wr_of(4 * i, WrOpcode::send, sges.back(), 0, 0));
    sges.push_back(s.sge(100000 + i * 2000, kWrite));
    wrs.push_back(wr_of(4 * i + 1, WrOpcode::rdma_write, sges.back(), d.addr(200000 + i * 2000), d.mr->rkey()));
    sges.push_back(s.sge(500000 + i * 3000, kRead));
    wrs.push_back(wr_of(4 * i + 2, WrOpcode::rdma_read, sges.back(), d.addr(500000 + i * 3000), d.mr->rkey()));
    sges.push_back(s.sge(800000 + i * 8, 8));
    wrs.push_back(wr_of(4 * i + 3, WrOpcode::atomic_fetch_and_add, sges.back(), d.addr(900000), d.mr->rkey()));
  }
  size_t bad;
  ASSERT_TRUE(s.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*s.scq, wrs.size(), 10000);
  ASSERT_EQ(sc.size(), wrs.size());
  const WcOpcode opc[4] = {WcOpcode::send, WcOpcode::rdma_write, WcOpcode::rdma_read, WcOpcode::fetch_add};
  const uint32_t lens[4] = {kSend, kWrite, kRead, 8};
  for (size_t i = 0; i < sc.size(); ++i) {
    ASSERT_EQ(sc[i].status, WcStatus::success) << i;
    EXPECT_EQ(sc[i].wr_id, i);
    EXPECT_EQ(sc[i].opcode, opc[i % 4]);
    EXPECT_EQ(sc[i].byte_len, lens[i % 4]);
  }
  auto rc = poll_n(*d.rcq, rounds);
  ASSERT_EQ(rc.size(), size_t(rounds));
  for (int i = 0; i < rounds; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(1000 + i));
    EXPECT_EQ(rc[i].byte_len, kSend);
    EXPECT_EQ(first_diff(s.buf.data() + i * 2000, d.buf.data() + i * 2000, kSend), -1) << "send " << i;
    EXPECT_EQ(first_diff(s.buf.data() + 100000 + i * 2000, d.buf.data() + 200000 + i * 2000, kWrite), -1)
        << "write " << i;
    EXPECT_EQ(first_diff(s.buf.data() + 500000 + i * 3000, d.buf.data() + 500000 + i * 3000, kRead), -1)
        << "read " << i;
    uint64_t v;
    std::memcpy(&v, s.buf.data() + 800000 + i * 8, 8);
    EXPECT_EQ(v, uint64_t(i)) << "fetch_add " << i;
  }
  EXPECT_EQ(*counter, uint64_t(rounds));
}

PairOptions near_wrap(uint32_t psn) {
  PairOptions o;
  o.mtu = Mtu::m256;
  o.psn_a = o.psn_b = psn;
  return o;
}

TEST(RcPsnWrap, MultiPacketTrafficCrossesTheWrapBothWays) {
  Pair p(near_wrap(kNearWrap));
  // 10 rounds of 22 PSNs each: from 0xfffff0 well past 0.
  traffic(p.a, p.b, 10, 1);
  if (HasFatalFailure()) return;
  traffic(p.b, p.a, 10, 2);
  if (HasFatalFailure()) return;
  traffic(p.a, p.b, 10, 3);  // again, now far from the wrap
}

TEST(RcPsnWrap, StartAtTheLastPsn) {
  Pair p(near_wrap(0xffffff));
  traffic(p.a, p.b, 4, 4);
}

// READs whose response PSNs run over the wrap: 256 packets, and 4096 packets
// (several request segments) starting right below it.
TEST(RcPsnWrap, ReadsSpanningTheWrap) {
  for (uint32_t len : {64u << 10, 1u << 20}) {
    SCOPED_TRACE(len);
    Pair p(near_wrap(0xffffff - 5));
    fill_pattern(p.b.buf.data(), len, len);
    Sge sge = p.a.sge(0, len);
    ASSERT_TRUE(post_send(*p.a.qp, wr_of(9, WrOpcode::rdma_read, sge, p.b.addr(0), p.b.mr->rkey())).ok());
    auto sc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::success);
    EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_read);
    EXPECT_EQ(sc[0].byte_len, len);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  }
}

// Loss right at the wrap.  From 0xfffff3 the first round is SEND
// fffff3..fffff7, WRITE fffff8..fffffe, READ ffffff..000007, FETCH_ADD 000008:
// drop the WRITE packet fffffd (sequence NAK, go-back-N over the wrap), the
// READ response 000001 (the tail is re-requested after the wrap) and the
// FETCH_ADD (timeout or NAK, once each).
TEST(RcPsnWrap, LossAtTheWrapRecovers) {
  auto net = net::FakeNetwork::create();
  PairOptions o = near_wrap(0xfffff3);
  o.fake = net;
  o.timeout = 12;
  Pair p(o);
  const Endpoint a = p.a.endpoint(), b = p.b.endpoint();
  auto done = std::make_shared<std::array<std::atomic<bool>, 3>>();
  net->set_filter(DropFilter{}.make([=](const WirePkt& w) {
    auto once = [&](int i) { return !(*done)[i].exchange(true); };
    if (w.src == a && (w.flags & wire::op::kWrite) && w.psn() == 0xfffffd) return once(0);
    if (w.src == b && (w.flags & wire::op::kRead) && w.psn() == 1) return once(1);
    if (w.src == a && (w.flags & wire::op::kAtomic) && w.psn() == 8) return once(2);
    return false;
  }));
  traffic(p.a, p.b, 6, 5);
  for (auto& d : *done) EXPECT_TRUE(d.load()) << "a planned drop never happened";
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_GE(ca.req_seq_naks_rcvd, 1u);
  // Later READs' responses behind the gap are discarded and asked for again
  // (go-back-N), so there may be more than one of each.
  EXPECT_GE(ca.req_read_gaps, 1u);
  EXPECT_GE(cb.resp_dup_reads, 1u);
  EXPECT_EQ(ca.req_retry_exc, 0u);
}

}  // namespace
}  // namespace uroce::test
