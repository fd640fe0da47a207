// Traffic for the capture test: every RC, UC and UD opcode uroce sends,
// between two devices on UDP port 4791 (so tshark decodes it as RoCEv2),
// multi-packet messages included.  Run by capture_test.sh under tshark.
#include <arpa/inet.h>

#include "../transport/loopback.hpp"
#include "transport/nic.hpp"
#include "verbs/mw.hpp"

namespace uroce::test {
namespace {

PairOptions options(QpType type) {
  PairOptions o;
  o.type = type;
  o.addr_a = "127.0.99.1";
  o.addr_b = "127.0.99.2";
  o.udp_port = 4791;
  o.buf_size = 64 * 1024;
  o.access |= access::kMwBind;  // SEND_WITH_INV revokes a window bound on B's buffer
  return o;
}

void expect_on_4791(const Pair& p) {
  ASSERT_EQ(p.a.ctx->nic().local().port, 4791) << "port 4791 on 127.0.99.1 is taken";
  ASSERT_EQ(p.b.ctx->nic().local().port, 4791) << "port 4791 on 127.0.99.2 is taken";
}

void send_and_check(Pair& p, SendWr wr, uint32_t len, bool expect_recv) {
  Sge sge = p.a.sge(0, len);
  wr.sg_list = {&sge, 1};
  wr.send_flags |= send_flags::kSignaled;
  fill_pattern(p.a.buf.data(), len, wr.wr_id);
  if (expect_recv) {
    ASSERT_TRUE(post_recv(*p.b.qp, wr.wr_id, {p.b.sge(0, 8192)}).ok());
  }
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  ASSERT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  if (expect_recv) {
    ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
  }
}

// Binds type 2 window `w` on B's QP (a grant of B's buffer); the grant's rkey.
uint32_t bind_window(Pair& p, Mw& w) {
  SendWr b;
  b.wr_id = 77;
  b.opcode = WrOpcode::bind_mw;
  b.send_flags = send_flags::kSignaled;
  b.rkey = (w.rkey() & ~0xffu) | ((w.rkey() + 1) & 0xffu);
  b.bind = {w.rkey(), p.b.mr->lkey(), p.b.addr(0), 4096, access::kRemoteWrite};
  EXPECT_TRUE(post_send(*p.b.qp, b).ok());
  auto c = poll_n(*p.b.scq, 1);
  EXPECT_EQ(c.size(), 1u);
  if (!c.empty()) {
    EXPECT_EQ(c[0].status, WcStatus::success) << to_string(c[0].status);
  }
  return b.rkey;
}

TEST(Capture, RcEveryOpcode) {
  Pair p(options(QpType::rc));
  expect_on_4791(p);
  auto window = Mw::alloc(*p.b.pd, MwType::type2);
  ASSERT_TRUE(window.ok()) << window.status().to_string();
  for (uint32_t len : {16u, 3000u}) {  // ONLY and FIRST/MIDDLE/LAST forms
    SendWr wr;
    wr.wr_id = len;
    wr.opcode = WrOpcode::send;
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::send_with_imm;
    wr.imm_data = htonl(7);
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::send_with_inv;
    wr.imm_data = bind_window(p, **window);  // the IETH revokes it
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::rdma_write;
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    send_and_check(p, wr, len, false);
    wr.opcode = WrOpcode::rdma_write_with_imm;
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::rdma_read;
    send_and_check(p, wr, len, false);
  }
  for (WrOpcode op : {WrOpcode::atomic_fetch_and_add, WrOpcode::atomic_cmp_and_swp}) {
    SendWr wr;
    wr.wr_id = 9;
    wr.opcode = op;
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    wr.compare_add = 1;
    send_and_check(p, wr, 8, false);
  }
  // An RNR NAK and a sequence NAK are harder to provoke on loopback; the
  // transport tests cover them over FakeIo.
  SendWr bad;
  bad.opcode = WrOpcode::rdma_write;
  bad.remote_addr = p.b.addr(0);
  bad.rkey = p.b.mr->rkey() ^ 0x5a5a;  // remote access error NAK
  Sge sge = p.a.sge(0, 8);
  bad.sg_list = {&sge, 1};
  bad.send_flags = send_flags::kSignaled;
  ASSERT_TRUE(post_send(*p.a.qp, bad).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::rem_access_err);
}

// A congested switch on the way to B (B's receive side marks every packet
// CE): B answers with CNPs, which cut A's rate.
TEST(Capture, CnpsAnswerCongestionMarks) {
  PairOptions o = options(QpType::rc);
  FaultConfig ce;
  ce.rx.ce = 1.0;
  o.faults_b = ce;
  Pair p(o);
  expect_on_4791(p);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  for (uint64_t i = 1; i <= 3; ++i) {
    wr.wr_id = i;
    send_and_check(p, wr, 3000, true);
  }
  const transport::Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.ecn_marked, cb.fault_rx_ce_marked);
  EXPECT_GE(cb.ecn_marked, 9u);
  EXPECT_GE(cb.cnp_sent, 1u);
  EXPECT_EQ(ca.cnp_handled, cb.cnp_sent);
  EXPECT_LT(ca.cc_rate_mbps, 25000u);
}

TEST(Capture, UcSendAndWrite) {
  Pair p(options(QpType::uc));
  expect_on_4791(p);
  for (uint32_t len : {16u, 3000u}) {
    SendWr wr;
    wr.wr_id = len;
    wr.opcode = WrOpcode::send;
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::send_with_imm;
    send_and_check(p, wr, len, true);
    wr.opcode = WrOpcode::rdma_write;
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    send_and_check(p, wr, len, false);
    wr.opcode = WrOpcode::rdma_write_with_imm;
    send_and_check(p, wr, len, true);
  }
}

TEST(Capture, UdSend) {
  Pair p(options(QpType::ud));
  expect_on_4791(p);
  AhAttr at;
  at.dgid = p.b.ctx->config().gids[0];
  auto ah = Ah::create(*p.a.pd, at);
  ASSERT_TRUE(ah.ok());
  for (WrOpcode op : {WrOpcode::send, WrOpcode::send_with_imm}) {
    SendWr wr;
    wr.wr_id = 3;
    wr.opcode = op;
    wr.ah = ah->get();
    wr.remote_qpn = p.b.qp->qpn();
    wr.remote_qkey = 0x11111111;
    send_and_check(p, wr, 100, true);
  }
}

}  // namespace
}  // namespace uroce::test
