// Unreliable Connection: SEND and RDMA WRITE (with and without immediate),
// multi-packet; a message that loses a packet is dropped whole (no receive
// completion, its receive WQE stays available) and the next one arrives.
#include <arpa/inet.h>

#include "fake_wire.hpp"

namespace uroce::test {
namespace {

PairOptions uc(std::shared_ptr<net::FakeNetwork> net = nullptr) {
  PairOptions o;
  o.type = QpType::uc;
  o.fake = std::move(net);
  return o;
}

SendWr wr_of(uint64_t id, WrOpcode opc, const Sge& s, const Side& peer, uint64_t roff = 0) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = opc;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.imm_data = htonl(0x5500 + uint32_t(id));
  wr.remote_addr = peer.addr(roff);
  wr.rkey = peer.mr->rkey();
  return wr;
}

class UcPath : public ::testing::TestWithParam<PacketPath> {};

TEST_P(UcPath, SendAndWriteWithAndWithoutImm) {
  Pair p(over(GetParam(), uc()));
  fill_pattern(p.a.buf.data(), 100000, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 10 + i, {p.b.sge(i * 10000, 10000)}).ok());
  Sge s1 = p.a.sge(0, 5000), s2 = p.a.sge(5000, 7), s3 = p.a.sge(20000, 30000), s4 = p.a.sge(60000, 3333);
  SendWr wrs[4] = {wr_of(1, WrOpcode::send, s1, p.b), wr_of(2, WrOpcode::send_with_imm, s2, p.b),
                   wr_of(3, WrOpcode::rdma_write, s3, p.b, 200000),
                   wr_of(4, WrOpcode::rdma_write_with_imm, s4, p.b, 300000)};
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 4);
  ASSERT_EQ(sc.size(), 4u);
  const WcOpcode sop[4] = {WcOpcode::send, WcOpcode::send, WcOpcode::rdma_write, WcOpcode::rdma_write};
  const uint32_t len[4] = {5000, 7, 30000, 3333};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].status, WcStatus::success);
    EXPECT_EQ(sc[i].opcode, sop[i]);
    EXPECT_EQ(sc[i].byte_len, len[i]);
  }
  auto rc = poll_n(*p.b.rcq, 3);
  ASSERT_EQ(rc.size(), 3u);
  const WcOpcode rop[3] = {WcOpcode::recv, WcOpcode::recv, WcOpcode::recv_rdma_with_imm};
  const uint32_t rlen[3] = {5000, 7, 3333};
  const uint32_t rflags[3] = {0, wc_flags::kWithImm, wc_flags::kWithImm};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(rc[i].opcode, rop[i]);
    EXPECT_EQ(rc[i].byte_len, rlen[i]);
    EXPECT_EQ(rc[i].wc_flags, rflags[i]);
    EXPECT_EQ(rc[i].qp_num, p.b.qp->qpn());
    EXPECT_EQ(rc[i].src_qp, p.a.qp->qpn());
  }
  EXPECT_EQ(rc[1].imm_data, htonl(0x5502));
  EXPECT_EQ(rc[2].imm_data, htonl(0x5504));
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 5000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 5000, p.b.buf.data() + 10000, 7), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 20000, p.b.buf.data() + 200000, 30000), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + 60000, p.b.buf.data() + 300000, 3333), -1);
  // UC never acknowledges.
  EXPECT_EQ(p.b.counters().resp_acks_sent, 0u);
  EXPECT_EQ(p.a.counters().req_acks_rcvd, 0u);
}

INSTANTIATE_TEST_SUITE_P(Over, UcPath, kEveryPacketPath, PacketPathName);

// Drops the n-th packet of A's traffic and checks recovery at the next message.
class UcLoss : public ::testing::TestWithParam<int> {};

TEST_P(UcLoss, BrokenMessageIsDroppedNextArrives) {
  const int which = GetParam();  // 1: FIRST, 2: a MIDDLE, 3: LAST of the first message
  auto net = net::FakeNetwork::create();
  Pair p(uc(net));
  auto n = std::make_shared<int>(0);
  net->set_filter(
      DropFilter{}.make([n, which, a = p.a.endpoint()](const WirePkt& w) { return w.src == a && ++*n == which; }));
  fill_pattern(p.a.buf.data(), 20000, 2);
  std::memset(p.b.buf.data(), 0, 40000);
  ASSERT_TRUE(post_recv(*p.b.qp, 21, {p.b.sge(0, 10000)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 22, {p.b.sge(20000, 10000)}).ok());
  Sge first = p.a.sge(0, 3000), second = p.a.sge(10000, 2500);
  SendWr wrs[2] = {wr_of(1, WrOpcode::send, first, p.b), wr_of(2, WrOpcode::send_with_imm, second, p.b)};
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(sc.size(), 2u);  // the sender cannot know: both complete
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(sc[1].status, WcStatus::success);
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  // The broken message used no receive: the next one fills the first WQE.
  EXPECT_EQ(rc[0].wr_id, 21u);
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].byte_len, 2500u);
  EXPECT_EQ(rc[0].wc_flags, wc_flags::kWithImm);
  EXPECT_EQ(rc[0].imm_data, htonl(0x5502));
  EXPECT_EQ(first_diff(p.a.buf.data() + 10000, p.b.buf.data(), 2500), -1);
  EXPECT_TRUE(drain(*p.b.rcq, 10).empty());
  EXPECT_EQ(p.b.counters().uc_dropped_messages, 1u);
  // The second WQE is still there for a third message.
  Sge third = p.a.sge(15000, 1111);
  ASSERT_TRUE(post_send(*p.a.qp, wr_of(3, WrOpcode::send, third, p.b)).ok());
  rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 22u);
  EXPECT_EQ(rc[0].byte_len, 1111u);
  EXPECT_EQ(first_diff(p.a.buf.data() + 15000, p.b.buf.data() + 20000, 1111), -1);
}

// The same for WRITE_WITH_IMM: the broken WRITE completes nothing.
TEST_P(UcLoss, BrokenWriteWithImmConsumesNoReceive) {
  const int which = GetParam();
  auto net = net::FakeNetwork::create();
  Pair p(uc(net));
  auto n = std::make_shared<int>(0);
  net->set_filter(
      DropFilter{}.make([n, which, a = p.a.endpoint()](const WirePkt& w) { return w.src == a && ++*n == which; }));
  fill_pattern(p.a.buf.data(), 20000, 3);
  ASSERT_TRUE(post_recv(*p.b.qp, 31, {}).ok());
  Sge first = p.a.sge(0, 3000), second = p.a.sge(10000, 4000);
  SendWr wrs[2] = {wr_of(1, WrOpcode::rdma_write_with_imm, first, p.b, 100000),
                   wr_of(2, WrOpcode::rdma_write_with_imm, second, p.b, 200000)};
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  ASSERT_EQ(poll_n(*p.a.scq, 2).size(), 2u);
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 31u);
  EXPECT_EQ(rc[0].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(rc[0].byte_len, 4000u);
  EXPECT_EQ(rc[0].imm_data, htonl(0x5502));
  EXPECT_EQ(first_diff(p.a.buf.data() + 10000, p.b.buf.data() + 200000, 4000), -1);
  EXPECT_TRUE(drain(*p.b.rcq, 10).empty());
  EXPECT_EQ(p.b.counters().uc_dropped_messages, 1u);
}

INSTANTIATE_TEST_SUITE_P(LostPacket, UcLoss, ::testing::Values(1, 2, 3), [](const ::testing::TestParamInfo<int>& i) {
  return std::string(i.param == 1 ? "First" : i.param == 2 ? "Middle" : "Last");
});

}  // namespace
}  // namespace uroce::test
