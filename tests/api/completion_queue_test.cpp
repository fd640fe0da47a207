// uroce::CompletionQueue: polling, limits, overflow.
#include <thread>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

TEST(CompletionQueue, SizeIsChecked) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto cq = ctx.create_cq(0);
  ASSERT_FALSE(cq.ok());
  EXPECT_EQ(cq.status().code(), EINVAL);
  EXPECT_NE(cq.status().message().find("cqe"), std::string_view::npos);
  cq = ctx.create_cq(ctx.device_attr().max_cqe + 1);
  ASSERT_FALSE(cq.ok());
  EXPECT_EQ(cq.status().code(), EINVAL);
  auto good = must(ctx.create_cq(100), "create_cq");
  EXPECT_GE(good.capacity(), 100u);
}

TEST(CompletionQueue, EmptyPollReturnsNothing) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto cq = must(ctx.create_cq(8), "create_cq");
  Wc wc[4];
  EXPECT_EQ(must(cq.poll(wc), "poll"), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(must(cq.poll_for(wc, 20ms), "poll_for"), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
}

TEST(CompletionQueue, ReqNotifyNeedsAChannel) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto cq = must(ctx.create_cq(8), "create_cq");
  Status s = cq.req_notify();
  EXPECT_EQ(s.code(), EINVAL);
  EXPECT_NE(s.message().find("channel"), std::string_view::npos);
}

TEST(CompletionQueue, CompletionsComeOldestFirstAndByBatch) {
  Pair p;
  std::vector<Sge> sges;
  std::vector<SendWr> wrs;
  sges.reserve(5);
  for (int i = 0; i < 5; ++i) sges.push_back(p.a.sge(size_t(i) * 64, 64));
  for (int i = 0; i < 5; ++i)
    wrs.push_back(
        rdma(WrOpcode::rdma_write, sges[size_t(i)], p.b.addr(size_t(i) * 64), p.b.mr->rkey(), 100 + uint64_t(i)));
  must(p.a.qp->post_send(wrs), "post 5");
  std::vector<Wc> got;
  while (got.size() < 5) {
    Wc wc[3];  // smaller than what is queued: poll returns at most 3
    const int n = must(p.a.scq->poll_for(wc, 5000ms), "poll");
    ASSERT_GT(n, 0);
    ASSERT_LE(n, 3);
    got.insert(got.end(), wc, wc + n);
  }
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].wr_id, 100 + i);
    EXPECT_EQ(got[i].status, WcStatus::success);
    EXPECT_EQ(got[i].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(got[i].qp_num, p.a.qp->qpn());
  }
}

TEST(CompletionQueue, UnsignaledWorkCompletesSilently) {
  Pair p;
  Sge s = p.a.sge(0, 64);
  SendWr quiet = rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey(), 1);
  quiet.send_flags = 0;
  SendWr loud = rdma(WrOpcode::rdma_write, s, p.b.addr(64), p.b.mr->rkey(), 2);
  must(p.a.qp->post_send(quiet), "quiet");
  must(p.a.qp->post_send(loud), "loud");
  EXPECT_EQ(wait_wc(*p.a.scq).wr_id, 2u);
  EXPECT_TRUE(drain(*p.a.scq, 20ms).empty());
}

TEST(CompletionQueue, OverflowIsReportedAndNamesTheCq) {
  PairOptions o;
  o.cqe = 1;
  Pair p(o);
  Sge s = p.a.sge(0, 8);
  SendWr w1 = rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey(), 1);
  SendWr w2 = rdma(WrOpcode::rdma_write, s, p.b.addr(8), p.b.mr->rkey(), 2);
  must(p.a.qp->post_send(w1), "w1");
  must(p.a.qp->post_send(w2), "w2");
  // Both complete before we poll: the second does not fit.
  auto ev = must(p.a.ctx->get_async_event(5000), "async event");
  EXPECT_EQ(ev.type, AsyncEventType::cq_err);
  EXPECT_EQ(ev.cq, &*p.a.scq);
  EXPECT_STREQ(to_string(ev.type), "CQ_ERR");
  Wc wc[4];
  EXPECT_EQ(must(p.a.scq->poll(wc), "poll"), 1);
  EXPECT_EQ(wc[0].wr_id, 1u);
  auto after = p.a.scq->poll(wc);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), EOVERFLOW);
}

TEST(CompletionQueue, ResizeKeepsQueuedCompletions) {
  Pair p;
  Sge s = p.a.sge(0, 8);
  for (uint64_t i = 0; i < 3; ++i)
    must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey(), i)), "post");
  // Let all three arrive without taking them: poll the peer side, not ours.
  const auto end = std::chrono::steady_clock::now() + 5000ms;
  while (must(p.a.ctx->counter("completions"), "completions") < 3 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  Status s2 = p.a.scq->resize(2);
  EXPECT_EQ(s2.code(), EINVAL);
  must(p.a.scq->resize(8), "resize");
  EXPECT_GE(p.a.scq->capacity(), 8u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(wait_wc(*p.a.scq).wr_id, i);
}

}  // namespace
}  // namespace uroce::apitest
