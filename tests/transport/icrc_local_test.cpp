// The ICRCs of a same-host uroce peer over UDP: its packets cross memory
// only (as loopback datagrams do), so they are taken unchecked
// (rx_icrc_unchecked), but only while neither side injects faults: a side
// with faults publishes no kBindingExactTx and counts as no host-local path,
// and every ICRC is checked both ways.
#include <gtest/gtest.h>

#include "fake_wire.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kLen = 3000;  // three packets at MTU 1024
constexpr int kMessages = 20;

// kMessages SENDs of kLen bytes each way (a distinct pattern each), every one
// checked byte for byte.
void exchange(Pair& p) {
  for (int i = 0; i < kMessages; ++i) {
    fill_pattern(p.a.buf.data(), kLen, uint8_t(2 * i));
    fill_pattern(p.b.buf.data(), kLen, uint8_t(2 * i + 1));
    ASSERT_TRUE(post_recv(*p.b.qp, 100 + i, {p.b.sge(100000, kLen)}).ok());
    ASSERT_TRUE(post_recv(*p.a.qp, 200 + i, {p.a.sge(100000, kLen)}).ok());
    Sge sa = p.a.sge(0, kLen), sb = p.b.sge(0, kLen);
    ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sa)).ok());
    ASSERT_TRUE(post_send(*p.b.qp, make_wr(2, WrOpcode::send, &sb)).ok());
    for (Side* s : {&p.a, &p.b}) {
      auto sc = poll_n(*s->scq, 1, 20000);
      ASSERT_EQ(sc.size(), 1u);
      EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
      auto rc = poll_n(*s->rcq, 1, 20000);
      ASSERT_EQ(rc.size(), 1u);
      EXPECT_EQ(rc[0].status, WcStatus::success) << to_string(rc[0].status);
      EXPECT_EQ(rc[0].byte_len, kLen);
    }
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 100000, kLen), -1) << "message " << i;
    EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data() + 100000, kLen), -1) << "message " << i;
  }
}

TEST(IcrcLocal, ASameHostPeersPacketsAreTakenWithoutTheCheck) {
  Pair p(over(PacketPath::udp));
  exchange(p);
  for (Side* s : {&p.a, &p.b}) {
    const Counters c = s->counters();
    EXPECT_GE(c.rx_packets, uint64_t(kMessages) * 3);
    EXPECT_EQ(c.rx_icrc_unchecked, c.rx_packets);  // every one came from the QP's peer
    EXPECT_EQ(c.rx_icrc_bad, 0u);
  }
}

TEST(IcrcLocal, FaultsOnOneSideHaveEveryIcrcChecked) {
  PairOptions o = over(PacketPath::udp);
  FaultConfig fc;
  fc.seed = 7;
  fc.tx.corrupt = 0.1;  // B's packets to A
  fc.rx.corrupt = 0.1;  // A's packets to B
  o.faults_b = fc;
  Pair p(o);
  exchange(p);
  const Counters a = p.a.counters(), b = p.b.counters();
  // A's peer publishes no kBindingExactTx; B counts no host-local path.
  EXPECT_EQ(a.rx_icrc_unchecked, 0u);
  EXPECT_EQ(b.rx_icrc_unchecked, 0u);
  EXPECT_GT(a.rx_icrc_bad, 0u) << "B's corrupted packets were caught at A";
  EXPECT_GT(b.rx_icrc_bad, 0u) << "corrupted on receipt at B, caught there";
}

}  // namespace
}  // namespace uroce::test
