// RC operations between two device contexts, over each packet path (UDP
// sockets on loopback, the in-memory FakeNetwork, shared-memory rings):
// byte-exact data and the exact completions of every opcode.
#include <arpa/inet.h>

#include "loopback.hpp"

namespace uroce::test {
namespace {

class RcOps : public ::testing::TestWithParam<PacketPath> {
 protected:
  Pair p{over(GetParam())};
};

TEST_P(RcOps, SendRecvDeliversBytesAndCompletions) {
  fill_pattern(p.a.buf.data(), 5000, 1);
  ASSERT_TRUE(post_recv(*p.b.qp, 77, {p.b.sge(0, 8192)}).ok());
  SendWr wr;
  wr.wr_id = 42;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(0, 5000);
  wr.sg_list = {&sge, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::success) << to_string(rc[0].status);
  EXPECT_EQ(rc[0].wr_id, 77u);
  EXPECT_EQ(rc[0].opcode, WcOpcode::recv);
  EXPECT_EQ(rc[0].byte_len, 5000u);
  EXPECT_EQ(rc[0].qp_num, p.b.qp->qpn());
  EXPECT_EQ(rc[0].src_qp, p.a.qp->qpn());
  EXPECT_EQ(rc[0].wc_flags, 0u);
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data(), 5000), 0);
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(sc[0].wr_id, 42u);
  EXPECT_EQ(sc[0].opcode, WcOpcode::send);
  EXPECT_EQ(sc[0].byte_len, 5000u);
}

TEST_P(RcOps, SendWithImmCarriesImmediate) {
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 64)}).ok());
  SendWr wr;
  wr.opcode = WrOpcode::send_with_imm;
  wr.imm_data = htonl(0xdeadbeef);
  wr.send_flags = send_flags::kSignaled;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].byte_len, 0u);
  EXPECT_EQ(rc[0].wc_flags, wc_flags::kWithImm);
  EXPECT_EQ(ntohl(rc[0].imm_data), 0xdeadbeefu);
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
}

TEST_P(RcOps, RdmaWriteLandsWithoutResponderCompletion) {
  fill_pattern(p.a.buf.data(), 70000, 2);
  SendWr wr;
  wr.wr_id = 5;
  wr.opcode = WrOpcode::rdma_write;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(0, 70000);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.addr(1000);
  wr.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_write);
  EXPECT_EQ(sc[0].byte_len, 70000u);
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data() + 1000, 70000), 0);
  EXPECT_EQ(p.b.buf[999], 0);
  EXPECT_EQ(p.b.buf[71000], 0);
  EXPECT_TRUE(drain(*p.b.rcq, 20).empty());
}

TEST_P(RcOps, RdmaWriteWithImmConsumesReceive) {
  fill_pattern(p.a.buf.data(), 3000, 3);
  ASSERT_TRUE(post_recv(*p.b.qp, 9, {}).ok());
  SendWr wr;
  wr.opcode = WrOpcode::rdma_write_with_imm;
  wr.imm_data = htonl(1234);
  Sge sge = p.a.sge(0, 3000);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.addr(0);
  wr.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].wr_id, 9u);
  EXPECT_EQ(rc[0].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(rc[0].byte_len, 3000u);
  EXPECT_EQ(ntohl(rc[0].imm_data), 1234u);
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data(), 3000), 0);
}

TEST_P(RcOps, RdmaReadFetchesRemoteBytes) {
  fill_pattern(p.b.buf.data(), 100000, 4);
  SendWr wr;
  wr.wr_id = 8;
  wr.opcode = WrOpcode::rdma_read;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(16, 100000);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.addr(0);
  wr.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_read);
  EXPECT_EQ(sc[0].byte_len, 100000u);
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 16, p.b.buf.data(), 100000), 0);
}

TEST_P(RcOps, AtomicsReturnOriginalValue) {
  uint64_t* target = reinterpret_cast<uint64_t*>(p.b.buf.data() + 64);
  *target = 100;
  SendWr wr;
  wr.opcode = WrOpcode::atomic_fetch_and_add;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(0, 8);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.addr(64);
  wr.rkey = p.b.mr->rkey();
  wr.compare_add = 5;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  EXPECT_EQ(sc[0].opcode, WcOpcode::fetch_add);
  EXPECT_EQ(sc[0].byte_len, 8u);
  uint64_t got;
  std::memcpy(&got, p.a.buf.data(), 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(*target, 105u);

  wr.opcode = WrOpcode::atomic_cmp_and_swp;
  wr.compare_add = 105;
  wr.swap = 7;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].opcode, WcOpcode::comp_swap);
  std::memcpy(&got, p.a.buf.data(), 8);
  EXPECT_EQ(got, 105u);
  EXPECT_EQ(*target, 7u);
  // A failed compare leaves the target alone and returns it.
  wr.compare_add = 1;
  wr.swap = 99;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  std::memcpy(&got, p.a.buf.data(), 8);
  EXPECT_EQ(got, 7u);
  EXPECT_EQ(*target, 7u);
}

INSTANTIATE_TEST_SUITE_P(Over, RcOps, kEveryPacketPath, PacketPathName);

// Deep queues start with room for 16 WRs and grow as WRs pile up
// (transport/work_queue.hpp): 200 SENDs of 100 bytes posted in lists of 50,
// every other one inline, so the send queue grows while the earlier ones
// are in flight, to 200 receives posted the same way.  Every message lands byte-exact and in
// order, and both sides complete all 200 in order.
class RcDeepQueue : public ::testing::TestWithParam<PacketPath> {};

TEST_P(RcDeepQueue, QueuesGrowingWhileWrsAreInFlightLoseNothing) {
  PairOptions o;
  o.max_send_wr = o.max_recv_wr = 256;
  o.cqe = 512;
  Pair p{over(GetParam(), o)};
  constexpr uint32_t kMsgs = 200, kLen = 100, kList = 50;
  fill_pattern(p.a.buf.data(), kMsgs * kLen, 9);
  for (uint32_t first = 0; first < kMsgs; first += kList) {
    std::vector<RecvWr> rwrs(kList);
    std::vector<Sge> rsges(kList);
    for (uint32_t i = 0; i < kList; ++i) {
      rsges[i] = p.b.sge(size_t(first + i) * kLen, kLen);
      rwrs[i].wr_id = 1000 + first + i;
      rwrs[i].sg_list = {&rsges[i], 1};
    }
    size_t bad = 99;
    ASSERT_TRUE(p.b.qp->post_recv(rwrs, &bad).ok());
  }
  for (uint32_t first = 0; first < kMsgs; first += kList) {
    std::vector<SendWr> wrs(kList);
    std::vector<Sge> sges(kList);
    for (uint32_t i = 0; i < kList; ++i) {
      sges[i] = p.a.sge(size_t(first + i) * kLen, kLen);
      wrs[i].wr_id = first + i;
      wrs[i].opcode = WrOpcode::send;
      // Every other one inline: its bytes live in the queue and move with it.
      wrs[i].send_flags = send_flags::kSignaled | (i % 2 ? send_flags::kInline : 0);
      wrs[i].sg_list = {&sges[i], 1};
    }
    size_t bad = 99;
    ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok()) << "list at " << first;
  }
  auto rc = poll_n(*p.b.rcq, kMsgs);
  ASSERT_EQ(rc.size(), kMsgs);
  for (uint32_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success) << i;
    EXPECT_EQ(rc[i].wr_id, 1000u + i);
    EXPECT_EQ(rc[i].byte_len, kLen);
  }
  auto sc = poll_n(*p.a.scq, kMsgs);
  ASSERT_EQ(sc.size(), kMsgs);
  for (uint32_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(sc[i].status, WcStatus::success) << i;
    EXPECT_EQ(sc[i].wr_id, i);
  }
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data(), kMsgs * kLen), 0);
}

INSTANTIATE_TEST_SUITE_P(Over, RcDeepQueue, kEveryPacketPath, PacketPathName);

// A ping-pong on one CQ per side: the ACK of the ping (held back to leave
// with the pong) still reaches the pinger before the pong, so its SEND
// completes before the pong's RECV, as with hardware.  Programs that take
// one completion per event (perftest's ib_send_lat -e) rely on this order.
TEST(RcOrder, AckOfThePingCompletesBeforeThePongArrives) {
  PairOptions o;
  o.connect = false;
  Pair p(o);
  auto qa = p.create_qp(p.a, p.a.scq.get(), p.a.scq.get());
  auto qb = p.create_qp(p.b, p.b.scq.get(), p.b.scq.get());
  ASSERT_TRUE(qa && qb);
  p.connect_qp(*qa, *qb, p.b, o.psn_b, o.psn_a);
  p.connect_qp(*qb, *qa, p.a, o.psn_a, o.psn_b);
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(post_recv(*qa, 10, {p.a.sge(4096, 64)}).ok());
    ASSERT_TRUE(post_recv(*qb, 20, {p.b.sge(4096, 64)}).ok());
    SendWr ping;
    ping.wr_id = 1;
    ping.opcode = WrOpcode::send;
    ping.send_flags = send_flags::kSignaled;
    Sge sa = p.a.sge(0, 8);
    ping.sg_list = {&sa, 1};
    ASSERT_TRUE(post_send(*qa, ping).ok());
    auto got = poll_n(*p.b.scq, 1);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].opcode, WcOpcode::recv);
    SendWr pong = ping;
    pong.wr_id = 2;
    Sge sb = p.b.sge(0, 8);
    pong.sg_list = {&sb, 1};
    ASSERT_TRUE(post_send(*qb, pong).ok());
    auto a = poll_n(*p.a.scq, 2);
    ASSERT_EQ(a.size(), 2u) << "round " << round;
    EXPECT_EQ(a[0].opcode, WcOpcode::send) << "round " << round;
    EXPECT_EQ(a[1].opcode, WcOpcode::recv) << "round " << round;
    auto b = poll_n(*p.b.scq, 1);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].opcode, WcOpcode::send);
  }
}

}  // namespace
}  // namespace uroce::test
