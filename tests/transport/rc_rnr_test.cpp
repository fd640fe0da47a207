// Receiver Not Ready: a SEND (or WRITE_WITH_IMM) that finds no receive is
// RNR-NAKed and retried after the peer's min_rnr_timer; rnr_retry 0..6 gives
// up with RNR_RETRY_EXC_ERR after exactly rnr_retry+1 RNR NAKs, 7 retries
// forever.
#include <arpa/inet.h>

#include <thread>

#include "loopback.hpp"
#include "transport/qp_engine.hpp"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;

SendWr message(uint64_t id, WrOpcode opc, const Sge& s, const Side& peer) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = opc;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.imm_data = htonl(0xabcd0000 + uint32_t(id));
  wr.remote_addr = peer.addr(100000);
  wr.rkey = peer.mr->rkey();
  return wr;
}

class RcRnr : public ::testing::TestWithParam<WrOpcode> {};

// No receive posted: RNR NAKs until another thread posts one, then success.
TEST_P(RcRnr, SucceedsOnceAReceiveIsPosted) {
  const WrOpcode opc = GetParam();
  for (uint32_t len : {100u, 5000u}) {  // one packet, and several
    SCOPED_TRACE(len);
    Pair p;
    fill_pattern(p.a.buf.data(), len, len);
    Sge s = p.a.sge(0, len);
    ASSERT_TRUE(post_send(*p.a.qp, message(1, opc, s, p.b)).ok());
    ASSERT_TRUE(wait_until([&] { return p.a.counters().req_rnr_naks_rcvd >= 3; }));
    std::thread poster([&] { ASSERT_TRUE(post_recv(*p.b.qp, 44, {p.b.sge(0, 8192)}).ok()); });
    poster.join();
    auto sc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
    EXPECT_EQ(sc[0].wr_id, 1u);
    auto rc = poll_n(*p.b.rcq, 1);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].wr_id, 44u);
    EXPECT_EQ(rc[0].byte_len, len);
    EXPECT_EQ(rc[0].opcode, opc == WrOpcode::send ? WcOpcode::recv : WcOpcode::recv_rdma_with_imm);
    if (opc != WrOpcode::send) {
      EXPECT_EQ(rc[0].imm_data, htonl(0xabcd0001));
    }
    const uint8_t* landed = p.b.buf.data() + (opc == WrOpcode::send ? 0 : 100000);
    EXPECT_EQ(first_diff(p.a.buf.data(), landed, len), -1);
    Counters ca = p.a.counters(), cb = p.b.counters();
    EXPECT_GE(ca.req_rnr_naks_rcvd, 3u);
    EXPECT_EQ(ca.req_rnr_naks_rcvd, cb.resp_rnr_naks_sent);
    EXPECT_EQ(ca.req_rnr_retry_exc, 0u);
    EXPECT_EQ(ca.req_seq_naks_rcvd, 0u) << "an RNR NAK was hidden behind a sequence NAK";
    EXPECT_TRUE(drain(*p.b.rcq, 5).empty());
  }
}

// rnr_retry n < 7: exactly n+1 RNR NAKs, then RNR_RETRY_EXC_ERR and ERR.
TEST_P(RcRnr, RetryCountIsExact) {
  const WrOpcode opc = GetParam();
  for (uint8_t n = 0; n <= 6; ++n) {
    SCOPED_TRACE(int(n));
    PairOptions o;
    o.rnr_retry = n;
    Pair p(o);
    Sge s = p.a.sge(0, 3000);
    SendWr wrs[2] = {message(1, opc, s, p.b), message(2, WrOpcode::rdma_write, s, p.b)};
    size_t bad;
    ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
    auto sc = poll_n(*p.a.scq, 2);
    ASSERT_EQ(sc.size(), 2u);
    EXPECT_EQ(sc[0].status, WcStatus::rnr_retry_exc_err) << to_string(sc[0].status);
    EXPECT_EQ(sc[0].wr_id, 1u);
    EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
    Counters ca = p.a.counters(), cb = p.b.counters();
    EXPECT_EQ(ca.req_rnr_naks_rcvd, n + 1u);
    EXPECT_EQ(cb.resp_rnr_naks_sent, n + 1u);
    EXPECT_EQ(ca.req_rnr_retry_exc, 1u);
  }
}

// rnr_retry 7 never gives up: post the receive after ~50 ms.
TEST_P(RcRnr, Retry7RetriesForever) {
  const WrOpcode opc = GetParam();
  PairOptions o;
  o.rnr_retry = 7;
  o.min_rnr_timer = 12;  // 0.96 ms: ~50 RNR NAKs in 50 ms
  Pair p(o);
  Sge s = p.a.sge(0, 3000);
  ASSERT_TRUE(post_send(*p.a.qp, message(1, opc, s, p.b)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(drain(*p.a.scq, 50).empty());
  std::thread poster([&] { ASSERT_TRUE(post_recv(*p.b.qp, 3, {p.b.sge(0, 4096)}).ok()); });
  poster.join();
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  Counters ca = p.a.counters();
  EXPECT_GE(ca.req_rnr_naks_rcvd, 8u);  // more than any finite rnr_retry (6) allows
  EXPECT_LE(ca.req_rnr_naks_rcvd, 200u) << "RNR waits shorter than min_rnr_timer";
  EXPECT_EQ(ca.req_rnr_retry_exc, 0u);
  EXPECT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
}

// The requester's machines through an RNR wait: the gate closes while it
// waits out the peer's min_rnr_timer (the retransmission timer stays armed
// for what is outstanding), and once the message is acknowledged both are
// back at rest.
TEST_P(RcRnr, GateWaitsThenOpens) {
  PairOptions o;
  o.min_rnr_timer = 24;  // 40.96 ms: the requester spends most of its time waiting
  Pair p(o);
  Sge s = p.a.sge(0, 3000);
  ASSERT_TRUE(post_send(*p.a.qp, message(1, GetParam(), s, p.b)).ok());
  transport::EngineSnapshot e;
  ASSERT_TRUE(wait_until([&] { return (e = p.a.qp->debug_snapshot()).rnr == transport::RnrGate::waiting; }))
      << to_string(e);
  EXPECT_EQ(e.retry, transport::RetryTimer::armed) << to_string(e);
  EXPECT_NE(e.una_psn, e.next_psn) << to_string(e);
  ASSERT_TRUE(post_recv(*p.b.qp, 3, {p.b.sge(0, 4096)}).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  ASSERT_TRUE(wait_until([&] { return (e = p.a.qp->debug_snapshot()).retry == transport::RetryTimer::off; }))
      << to_string(e);
  EXPECT_EQ(e.rnr, transport::RnrGate::open) << to_string(e);
  EXPECT_EQ(e.una_psn, e.next_psn) << to_string(e);
  EXPECT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
}

// An RNR wait longer than the ACK timeout loses nothing: the timeout runs
// from the resend after the wait, so with retry_cnt 0 (and no retry floor)
// the message still gets through once a receive is posted.
TEST_P(RcRnr, WaitsLongerThanTheAckTimeoutCostNoRetry) {
  PairOptions o;
  transport::CongestionConfig c;
  c.retry_floor = 0ms;
  o.congestion = c;
  o.timeout = 12;  // 16.8 ms: a loaded machine's scheduling delays stay well inside it
  o.retry_cnt = 0;
  o.rnr_retry = 7;
  o.min_rnr_timer = 24;  // 40.96 ms
  Pair p(o);
  Sge s = p.a.sge(0, 3000);
  ASSERT_TRUE(post_send(*p.a.qp, message(1, GetParam(), s, p.b)).ok());
  ASSERT_TRUE(wait_until([&] { return p.a.counters().req_rnr_naks_rcvd >= 4; }));
  ASSERT_TRUE(post_recv(*p.b.qp, 3, {p.b.sge(0, 4096)}).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_retry_exc, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Ops, RcRnr, ::testing::Values(WrOpcode::send, WrOpcode::rdma_write_with_imm),
                         [](const ::testing::TestParamInfo<WrOpcode>& i) {
                           return i.param == WrOpcode::send ? "Send" : "WriteWithImm";
                         });

}  // namespace
}  // namespace uroce::test
