// Transport retries: when the peer stops answering (its packets all lost, its
// QP or its whole context destroyed), the requester retries retry_cnt times,
// one local ACK timeout apart, then completes the oldest WR with
// RETRY_EXC_ERR and flushes the rest -- by default not before nothing has
// been acknowledged for the retry floor (RcRetryFloor; the others test the
// exact count, floor 0).  Nothing hangs; everything can be destroyed
// afterwards.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "fake_wire.hpp"
#include "support/scoped_env.hpp"
#include "transport/congestion.hpp"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double interval_ms(uint8_t timeout) { return std::max(4.096e-3 * double(1u << timeout), 1.0); }

// Posts SEND, WRITE, READ, FETCH_ADD (one signaled, the rest not) and
// expects RETRY_EXC_ERR on the first, WR_FLUSH_ERR on the others.
void post_four_and_expect_retry_exc(Pair& p, int max_ms) {
  Sge s = p.a.sge(0, 3000), a8 = p.a.sge(8000, 8);
  SendWr wrs[4];
  const WrOpcode ops[4] = {WrOpcode::send, WrOpcode::rdma_write, WrOpcode::rdma_read, WrOpcode::atomic_fetch_and_add};
  for (int i = 0; i < 4; ++i) {
    wrs[i].wr_id = 100 + i;
    wrs[i].opcode = ops[i];
    wrs[i].send_flags = i == 0 ? send_flags::kSignaled : 0;
    wrs[i].sg_list = {i == 3 ? &a8 : &s, 1};
    wrs[i].remote_addr = p.b.ctx ? p.b.addr(0) : 0x1000;
    wrs[i].rkey = p.b.mr ? p.b.mr->rkey() : 1;
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 4, max_ms);
  ASSERT_EQ(sc.size(), 4u);
  const WcOpcode want[4] = {WcOpcode::send, WcOpcode::rdma_write, WcOpcode::rdma_read, WcOpcode::fetch_add};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(sc[i].status, i == 0 ? WcStatus::retry_exc_err : WcStatus::wr_flush_err);
    EXPECT_EQ(sc[i].opcode, want[i]);
    EXPECT_EQ(sc[i].qp_num, p.a.qp->qpn());
  }
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
  EXPECT_TRUE(drain(*p.a.scq, 5).empty());
}

// Gives up after exactly retry_cnt retries, as rdma_rxe: no retry floor.
PairOptions exact(PairOptions o = {}) {
  transport::CongestionConfig c;
  c.retry_floor = milliseconds(0);
  o.congestion = c;
  return o;
}

class RcRetry : public ::testing::TestWithParam<std::tuple<uint8_t, uint8_t>> {};

// Every packet is lost: exactly retry_cnt+1 timeouts, (retry_cnt+1) * timeout.
TEST_P(RcRetry, AllPacketsLost) {
  const auto [timeout, retry] = GetParam();
  auto net = net::FakeNetwork::create();
  PairOptions o = exact();
  o.fake = net;
  o.timeout = timeout;
  o.retry_cnt = retry;
  Pair p(o);
  net->set_filter([](net::FakePacket&) { return false; });
  const auto t0 = Clock::now();
  post_four_and_expect_retry_exc(p, 5000);
  const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const double want = (retry + 1) * interval_ms(timeout);
  EXPECT_GE(took, want - 1.0);
  // Timers wake on whole milliseconds; a loaded host adds scheduling delay.
  EXPECT_LE(took, 2 * want + (retry + 1) * 2.0 + 200.0);
  Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_timeouts, retry + 1u);
  EXPECT_EQ(ca.req_retry_exc, 1u);
  EXPECT_EQ(ca.req_packets, (retry + 1u) * 8u);  // per round: SEND 3 packets, WRITE 3, READ 1, atomic 1
}

INSTANTIATE_TEST_SUITE_P(Timeouts, RcRetry,
                         ::testing::Combine(::testing::Values(uint8_t(8), uint8_t(10), uint8_t(12)),
                                            ::testing::Values(uint8_t(0), uint8_t(3), uint8_t(7))),
                         [](const ::testing::TestParamInfo<RcRetry::ParamType>& i) {
                           return "Timeout" + std::to_string(std::get<0>(i.param)) + "Retry" +
                                  std::to_string(std::get<1>(i.param));
                         });

// After the NIC sat idle for longer than the timeout, a new request still
// gets a whole timeout: its ACK held back for 20 ms (of a 67 ms timeout)
// must not cost a retry, even with retry_cnt 0.
TEST(RcRetryTimer, FirstSendAfterIdleGetsTheFullTimeout) {
  auto net = net::FakeNetwork::create();
  PairOptions o;
  o.fake = net;
  o.timeout = 14;  // 67 ms
  o.retry_cnt = 0;
  Pair p(o);
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 64)}).ok());
  std::this_thread::sleep_for(milliseconds(150));  // idle: nothing moves
  ASSERT_TRUE(net->hold(p.b.endpoint(), true));
  Sge s = p.a.sge(0, 64);
  SendWr wr;
  wr.wr_id = 7;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(net->hold(p.b.endpoint(), false));
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
  EXPECT_EQ(p.a.counters().req_timeouts, 0u);
}

PairOptions fast() {
  PairOptions o = exact();
  o.timeout = 10;
  o.retry_cnt = 3;
  return o;
}

TEST(RcRetryPeerGone, PeerQpDestroyed) {
  Pair p(fast());
  p.b.qp.reset();
  post_four_and_expect_retry_exc(p, 2000);
  EXPECT_GT(p.b.counters().rx_unknown_qp, 0u);
}

TEST(RcRetryPeerGone, PeerContextDestroyed) {
  Pair p(fast());
  p.b.destroy();
  post_four_and_expect_retry_exc(p, 2000);
  // Tear A down by hand, in the order an application would.
  const auto t0 = Clock::now();
  p.a.qp.reset();
  p.a.mr.reset();
  p.a.scq.reset();
  p.a.rcq.reset();
  p.a.pd.reset();
  p.a.ctx.reset();
  EXPECT_LT(Clock::now() - t0, milliseconds(500));
}

// The peer vanishes in the middle of a 4 MiB WRITE: after 300 of its
// packets nothing gets through any more, and then its context goes away.
TEST(RcRetryPeerGone, PeerVanishesMidMessage) {
  auto net = net::FakeNetwork::create();
  PairOptions o = fast();
  o.fake = net;
  o.buf_size = 4 << 20;
  Pair p(o);
  auto n = std::make_shared<std::atomic<int>>(0);
  net->set_filter([n](net::FakePacket&) { return ++*n <= 300; });
  Sge s = p.a.sge(0, 4 << 20);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::rdma_write;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.remote_addr = p.b.addr(0);
  wr.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  ASSERT_TRUE(wait_until([&] { return *n > 300; }));
  p.b.destroy();
  auto sc = poll_n(*p.a.scq, 1, 2000);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::retry_exc_err);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_write);
  // retry_cnt 3: at least 4 timeouts (an ACK for the packets that got
  // through may land after the first one and restore the retry budget).
  EXPECT_GE(p.a.counters().req_timeouts, 4u);
  EXPECT_EQ(p.a.counters().req_retry_exc, 1u);
}

// With a retry floor, running out of retries is not enough: the QP gives up
// once nothing has been acknowledged for the floor, resending at every
// timeout until then.
TEST(RcRetryFloor, AllPacketsLostGivesUpAfterTheFloor) {
  auto net = net::FakeNetwork::create();
  PairOptions o = fast();  // 4 ms, retry_cnt 3: 16 ms without the floor
  o.congestion->retry_floor = milliseconds(300);
  o.fake = net;
  Pair p(o);
  net->set_filter([](net::FakePacket&) { return false; });
  const auto t0 = Clock::now();
  post_four_and_expect_retry_exc(p, 5000);
  EXPECT_GE(Clock::now() - t0, milliseconds(300));
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_retry_exc, 1u);
  EXPECT_GE(ca.req_retry_floor_timeouts, 1u);
  EXPECT_EQ(ca.req_timeouts, 4u + ca.req_retry_floor_timeouts);  // retry_cnt + 1, then the floor's
  EXPECT_EQ(ca.req_packets, ca.req_timeouts * 8u);               // each timeout resends all 8 packets
}

// A peer whose NIC stops answering for longer than retry_cnt timeouts --
// uroce's NIC is the peer's process, and a loaded host's scheduler can hold
// it back that long -- and then answers everything queued meanwhile: with
// the floor the QP waits for it (held until a timeout past retry_cnt has
// resent instead of giving up) and the SEND lands byte-exact; without it
// the same silence (held until the SEND has failed) ends the QP.
void silent_peer(std::chrono::milliseconds floor) {
  auto net = net::FakeNetwork::create();
  PairOptions o = fast();  // 4 ms, retry_cnt 3
  o.congestion->retry_floor = floor;
  o.fake = net;
  Pair p(o);
  fill_pattern(p.a.buf.data(), 3000, 5);
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 3000)}).ok());
  ASSERT_TRUE(net->hold(p.b.endpoint(), true));
  Sge s = p.a.sge(0, 3000);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(9, WrOpcode::send, &s)).ok());
  std::vector<Wc> sc;
  if (floor.count() > 0) {
    ASSERT_TRUE(wait_until([&] { return p.a.counters().req_retry_floor_timeouts >= 2; }, 10000));
  } else {
    sc = poll_n(*p.a.scq, 1, 10000);
    ASSERT_EQ(sc.size(), 1u);
  }
  ASSERT_TRUE(net->hold(p.b.endpoint(), false));
  const Counters ca = p.a.counters();
  if (floor.count() > 0) {
    sc = poll_n(*p.a.scq, 1, 10000);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
    auto rc = poll_n(*p.b.rcq, 1, 3000);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].byte_len, 3000u);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 3000), -1);
    EXPECT_EQ(ca.req_retry_exc, 0u);
  } else {
    EXPECT_EQ(sc[0].status, WcStatus::retry_exc_err) << to_string(sc[0].status);
    EXPECT_EQ(ca.req_retry_exc, 1u);
    EXPECT_EQ(ca.req_retry_floor_timeouts, 0u);
  }
}

TEST(RcRetryFloor, APeerSilentLongerThanItsRetriesIsWaitedFor) { silent_peer(milliseconds(2000)); }

TEST(RcRetryFloor, WithoutTheFloorTheSameSilenceEndsTheQp) { silent_peer(milliseconds(0)); }

// UROCE_RETRY_FLOOR_MS: whole milliseconds, digits only, up to an hour.
TEST(RcRetryFloor, UroceRetryFloorMsSetsIt) {
  ScopedEnv env("UROCE_RETRY_FLOOR_MS");
  const char* bad = nullptr;
  transport::CongestionConfig c;
  EXPECT_EQ(c.retry_floor, milliseconds(2000));
  for (const auto& [v, ms] : {std::pair{"150", 150}, {"0", 0}, {"3600000", 3600000}}) {
    env.set(v);
    EXPECT_TRUE(transport::congestion_from_env(c, bad)) << v;
    EXPECT_EQ(c.retry_floor, milliseconds(ms)) << v;
  }
  for (const char* v : {"-5", " -5", "+150", " 150", "150 ", "2s", "0x10", "99999999999999999999", "3600001"}) {
    env.set(v);
    bad = nullptr;
    EXPECT_FALSE(transport::congestion_from_env(c, bad)) << v;
    EXPECT_STREQ(bad, "UROCE_RETRY_FLOOR_MS") << v;
    EXPECT_EQ(c.retry_floor, milliseconds(3600000)) << v;  // left as it was
  }
}

}  // namespace
}  // namespace uroce::test
