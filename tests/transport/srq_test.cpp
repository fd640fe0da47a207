// Shared receive queues: several QPs (RC and UD) consume one SRQ in arrival
// order; the limit event fires once when the SRQ falls below the armed
// limit, and can be re-armed.
#include <fcntl.h>
#include <poll.h>

#include "loopback.hpp"

namespace uroce::test {
namespace {

// Waits up to `ms` for an async event on `ctx`.
std::optional<AsyncEvent> next_async(Context& ctx, int ms) {
  pollfd pfd{ctx.async_fd(), POLLIN, 0};
  if (::poll(&pfd, 1, ms) != 1) return std::nullopt;
  auto ev = ctx.get_async_event();
  if (!ev.ok()) return std::nullopt;
  return *ev;
}

Status post_srq(Srq& srq, uint64_t id, Sge sge) {
  RecvWr wr{id, {&sge, 1}};
  size_t bad;
  return srq.post_recv({&wr, 1}, &bad);
}

SendWr send_of(uint64_t id, const Sge& s) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  return wr;
}

class SrqPath : public ::testing::TestWithParam<PacketPath> {};

TEST_P(SrqPath, TwoRcQpsShareOneSrq) {
  PairOptions o = over(GetParam());
  o.srq_b = true;
  Pair p(o);
  auto qa2 = p.create_qp(p.a);
  auto qb2 = p.create_qp(p.b, nullptr, nullptr, p.b.srq.get());
  ASSERT_TRUE(qa2 && qb2);
  p.connect_qp(*qa2, *qb2, p.b, 0x500, 0x400);
  p.connect_qp(*qb2, *qa2, p.a, 0x400, 0x500);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(post_srq(*p.b.srq, 100 + i, p.b.sge(i * 4096, 4096)).ok());
  // Messages of distinct lengths, alternating between the two QPs; each is
  // completed before the next is sent, so the arrival order is known.
  fill_pattern(p.a.buf.data(), 60000, 1);
  for (int i = 0; i < 6; ++i) {
    Qp& from = i % 2 ? *qa2 : *p.a.qp;
    Sge s = p.a.sge(i * 10000, 1000 + i * 100);
    ASSERT_TRUE(post_send(from, send_of(i, s)).ok());
    auto rc = poll_n(*p.b.rcq, 1);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].wr_id, uint64_t(100 + i)) << "SRQ WQEs are consumed in order";
    EXPECT_EQ(rc[0].byte_len, 1000u + i * 100);
    EXPECT_EQ(rc[0].qp_num, i % 2 ? qb2->qpn() : p.b.qp->qpn());
    EXPECT_EQ(rc[0].src_qp, i % 2 ? qa2->qpn() : p.a.qp->qpn());
    EXPECT_EQ(first_diff(p.a.buf.data() + i * 10000, p.b.buf.data() + i * 4096, 1000 + i * 100), -1);
  }
  EXPECT_EQ(poll_n(*p.a.scq, 6).size(), 6u);
  // An empty SRQ makes RC senders RNR-wait; posting to it releases them.
  Sge s = p.a.sge(0, 10);
  ASSERT_TRUE(post_send(*qa2, send_of(9, s)).ok());
  ASSERT_TRUE(wait_until([&] { return p.a.counters().req_rnr_naks_rcvd > 0; }));
  ASSERT_TRUE(post_srq(*p.b.srq, 200, p.b.sge(0, 64)).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 200u);
  EXPECT_EQ(rc[0].qp_num, qb2->qpn());
  qa2.reset();
  qb2.reset();
}

TEST(Srq, LimitEventFiresOnceAndRearms) {
  PairOptions o;
  o.srq_b = true;
  Pair p(o);
  Srq& srq = *p.b.srq;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(post_srq(srq, i, p.b.sge(i * 64, 64)).ok());
  SrqAttr at;
  at.srq_limit = 3;
  ASSERT_TRUE(srq.modify(at, srq_attr_mask::kLimit).ok());
  EXPECT_EQ(srq.query().srq_limit, 3u);
  Sge s = p.a.sge(0, 8);
  auto consume = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(post_send(*p.a.qp, send_of(i, s)).ok());
    ASSERT_EQ(poll_n(*p.b.rcq, n).size(), size_t(n));
  };
  consume(2);  // 3 left: not below the limit
  EXPECT_FALSE(next_async(*p.b.ctx, 20).has_value());
  consume(1);  // 2 left: below
  auto ev = next_async(*p.b.ctx, 1000);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::srq_limit_reached);
  EXPECT_EQ(ev->element, &srq);
  EXPECT_EQ(srq.query().srq_limit, 0u) << "the limit disarms when it fires";
  consume(1);
  EXPECT_FALSE(next_async(*p.b.ctx, 20).has_value()) << "fired twice for one arming";
  // Re-arm: refill to 7, limit 4.
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(post_srq(srq, 10 + i, p.b.sge(i * 64, 64)).ok());
  at.srq_limit = 4;
  ASSERT_TRUE(srq.modify(at, srq_attr_mask::kLimit).ok());
  consume(3);  // 4 left
  EXPECT_FALSE(next_async(*p.b.ctx, 20).has_value());
  consume(1);  // 3 left
  ev = next_async(*p.b.ctx, 1000);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::srq_limit_reached);
  consume(2);
  EXPECT_FALSE(next_async(*p.b.ctx, 20).has_value());
  // A limit above max_wr is refused.
  at.srq_limit = srq.query().max_wr + 1;
  EXPECT_EQ(srq.modify(at, srq_attr_mask::kLimit).code(), EINVAL);
}

TEST(Srq, PostErrors) {
  PairOptions o;
  o.srq_b = true;
  o.max_recv_wr = 3;
  o.max_sge = 2;
  Pair p(o);
  Sge sg[3] = {p.b.sge(0, 8), p.b.sge(8, 8), p.b.sge(16, 8)};
  RecvWr wrs[5] = {{1, {sg, 1}}, {2, {sg, 3}}, {3, {sg, 1}}, {4, {sg, 1}}, {5, {sg, 1}}};
  size_t bad = 99;
  EXPECT_EQ(p.b.srq->post_recv({wrs, 2}, &bad).code(), EINVAL);
  EXPECT_EQ(bad, 1u);
  RecvWr ok[4] = {wrs[0], wrs[2], wrs[3], wrs[4]};
  EXPECT_EQ(p.b.srq->post_recv(ok, &bad).code(), ENOMEM);
  EXPECT_EQ(bad, 2u);  // one was queued before: two more fit
  // A QP on an SRQ has no receive queue of its own.
  EXPECT_EQ(p.b.qp->post_recv({wrs, 1}, &bad).code(), EINVAL);
}

TEST_P(SrqPath, UdQpReceivesFromSrq) {
  PairOptions o = over(GetParam());
  o.type = QpType::ud;
  o.srq_b = true;
  Pair p(o);
  auto ah = Ah::create(*p.a.pd, AhAttr{p.b.gid()});
  ASSERT_TRUE(ah.ok());
  ASSERT_TRUE(post_srq(*p.b.srq, 61, p.b.sge(0, 40 + 500)).ok());
  ASSERT_TRUE(post_srq(*p.b.srq, 62, p.b.sge(1024, 40 + 500)).ok());
  fill_pattern(p.a.buf.data(), 500, 7);
  Sge s = p.a.sge(0, 500);
  SendWr wr = send_of(1, s);
  wr.ah = ah->get();
  wr.remote_qpn = p.b.qp->qpn();
  wr.remote_qkey = p.opt.qkey;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 61u);
  EXPECT_EQ(rc[0].byte_len, 540u);
  EXPECT_EQ(rc[0].wc_flags, wc_flags::kGrh);
  EXPECT_EQ(rc[0].src_qp, p.a.qp->qpn());
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data() + 40, 500), -1);
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Over, SrqPath, kEveryPacketPath, PacketPathName);

}  // namespace
}  // namespace uroce::test
