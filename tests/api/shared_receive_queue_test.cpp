// uroce::SharedReceiveQueue: receiving through an SRQ, its limit event.
#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

PairOptions with_srq() {
  PairOptions o;
  o.srq_b = true;
  return o;
}

void send(Side& s, size_t off, uint32_t len) {
  Sge sge = s.sge(off, len);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&sge, 1};
  must(s.qp->post_send(wr), "post_send");
}

TEST(SharedReceiveQueue, MessagesLandInItsBuffers) {
  Pair p(with_srq());
  for (uint64_t i = 0; i < 3; ++i) {
    Sge r = p.b.sge(i * 1024, 1024);
    must(p.b.srq->post_recv(RecvWr{10 + i, {&r, 1}}), "srq post_recv");
  }
  fill(std::span<std::byte>(p.a.buf).first(3000), 31);
  for (size_t i = 0; i < 3; ++i) send(p.a, i * 1000, 1000);
  for (uint64_t i = 0; i < 3; ++i) {
    const Wc wc = wait_wc(*p.b.rcq);
    EXPECT_EQ(wc.status, WcStatus::success);
    EXPECT_EQ(wc.wr_id, 10 + i);  // in posting order
    EXPECT_EQ(wc.byte_len, 1000u);
    EXPECT_EQ(wc.qp_num, p.b.qp->qpn());
    EXPECT_EQ(std::memcmp(p.b.at(i * 1024), p.a.at(i * 1000), 1000), 0);
  }
}

TEST(SharedReceiveQueue, QpWithAnSrqRefusesItsOwnReceives) {
  Pair p(with_srq());
  Sge r = p.b.sge(0, 64);
  Status st = p.b.qp->post_recv(RecvWr{1, {&r, 1}});
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("SRQ"), std::string_view::npos);
}

TEST(SharedReceiveQueue, LimitEventNamesTheSrqOnce) {
  Pair p(with_srq());
  for (uint64_t i = 0; i < 4; ++i) {
    Sge r = p.b.sge(i * 64, 64);
    must(p.b.srq->post_recv(RecvWr{i, {&r, 1}}), "post_recv");
  }
  must(p.b.srq->arm_limit(3), "arm_limit");
  EXPECT_EQ(p.b.srq->query().srq_limit, 3u);
  send(p.a, 0, 8);  // 3 left: not below the limit
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 0u);
  EXPECT_EQ(p.b.ctx->get_async_event(20).status().code(), ETIMEDOUT);
  send(p.a, 0, 8);  // 2 left
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 1u);
  auto ev = must(p.b.ctx->get_async_event(1000), "async event");
  EXPECT_EQ(ev.type, AsyncEventType::srq_limit_reached);
  EXPECT_EQ(ev.srq, &*p.b.srq);
  EXPECT_EQ(p.b.srq->query().srq_limit, 0u);  // disarmed by the event
  send(p.a, 0, 8);
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 2u);
  EXPECT_EQ(p.b.ctx->get_async_event(20).status().code(), ETIMEDOUT);
}

TEST(SharedReceiveQueue, FullQueueIsEnomemWithTheFirstNotPosted) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto pd = must(ctx.alloc_pd(), "alloc_pd");
  auto srq = must(pd.create_srq(SrqConfig{4, 2, 0}), "create_srq");
  EXPECT_EQ(srq.query().max_wr, 4u);
  EXPECT_EQ(srq.query().max_sge, 2u);
  std::vector<std::byte> buf(256);
  auto mr = must(pd.reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr");
  Sge s = mr.sge(0, 8);
  std::vector<RecvWr> wrs(6, RecvWr{0, {&s, 1}});
  size_t bad = 0;
  Status st = srq.post_recv(wrs, &bad);
  EXPECT_EQ(st.code(), ENOMEM);
  EXPECT_EQ(bad, 4u);
  Sge three[3] = {s, s, s};
  st = srq.post_recv(RecvWr{0, {three, 3}});
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_EQ(srq.arm_limit(5).code(), EINVAL);
}

}  // namespace
}  // namespace uroce::apitest
