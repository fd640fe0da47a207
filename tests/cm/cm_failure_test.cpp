// The CM state machine when things go wrong: lost, duplicated and slow MADs
// (retries, MRA), unanswered REQ/REP, a vanished peer, simultaneous and
// destroy-driven disconnects, timewait, a failing QP, a full backlog.
#include "cm_fixture.hpp"

namespace uroce::cm::test {
namespace {

TEST_F(Cm_, LostReqIsSentAgain) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  int reqs = 0;
  deliver([&](const Sent& s) { return s.attr() == AttrId::req && reqs++ == 0 ? 0 : 1; });
  EXPECT_EQ(request_of_b(), nullptr);
  advance(ms(400));  // REQ timeout: 268 + 2 * 16.8 ms
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(wire.count(AttrId::req), 2u);
}

TEST_F(Cm_, LostRepIsSentAgainAndLostRtuDrawsItAgain) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver([](const Sent& m) { return m.attr() == AttrId::rep ? 0 : 1; });  // REP lost
  EXPECT_TRUE(a.rec.events.empty());
  int rtus = 0;
  ASSERT_TRUE(run_until([&, s = s] { return b.rec.of(s).size() == 2; }, ms(2000),
                        [&](const Sent& m) { return m.attr() == AttrId::rtu && rtus++ == 0 ? 0 : 1; }));
  // REP again -> a established, RTU lost -> REP again -> RTU again -> b established.
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
  EXPECT_EQ(wire.count(AttrId::rep), 3u);
  EXPECT_EQ(wire.count(AttrId::rtu), 2u);
  EXPECT_EQ(qa.mods.size(), 3u);  // the QP moved once
}

TEST_F(Cm_, EveryMadDuplicatedStillOneEventEach) {
  auto twice = [](const Sent&) { return 2; };
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver(twice);
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(b.rec.types(), (std::vector<ET>{ET::connect_request}));  // one child only
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver(twice);
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
  ASSERT_TRUE(a.cm.disconnect(c).ok());
  deliver(twice);
  ASSERT_TRUE(b.cm.disconnect(s).ok());
  deliver(twice);
  advance(ms(600));
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established, ET::disconnected, ET::timewait_exit}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected, ET::timewait_exit}));
  EXPECT_EQ(qa.mods.size(), 4u);
  EXPECT_EQ(qb.mods.size(), 4u);
}

TEST_F(Cm_, SlowAcceptDrawsMraAndTheActiveWaits) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  // b's application takes its time: a's REQ timer fires, the duplicate REQ
  // draws an MRA, and a waits the MRA's service timeout (2^20 * 4 us = 4.3 s)
  // instead of giving up after its 3 retries (~1.2 s).
  advance(ms(400));
  deliver();
  EXPECT_EQ(wire.count(AttrId::mra), 1u);
  EXPECT_EQ(c->state(), State::mra_req_rcvd);
  advance(ms(3000));
  deliver();
  EXPECT_TRUE(a.rec.events.empty());
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
}

TEST_F(Cm_, UnansweredReqEndsUnreachable) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  auto drop_req = [](const Sent& m) { return m.attr() == AttrId::req ? 0 : 1; };
  // 1 + 3 retries, 302 ms apart.
  EXPECT_FALSE(run_until([&] { return !a.rec.events.empty(); }, ms(1150), drop_req));
  ASSERT_TRUE(run_until([&] { return !a.rec.events.empty(); }, ms(200), drop_req));
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::unreachable}));
  EXPECT_EQ(a.rec.last(ET::unreachable)->status, -ETIMEDOUT);
  EXPECT_EQ(wire.count(AttrId::req), 4u);
  EXPECT_EQ(wire.count(AttrId::rej), 1u);  // REJ "timeout" to whoever might have it
  EXPECT_EQ(a.cm.conn_count(), 0u);
}

TEST_F(Cm_, UnansweredRepEndsUnreachableOnThePassiveSide) {
  auto [c, s] = connect_pair();
  (void)c;
  ASSERT_NE(s, nullptr);
  // Start again with every REP lost.
  wire.queue.clear();
  FakeQp qc(0x4003), qs(0x8003);
  Id* c2 = resolved_a();
  a.cm.set_qp(c2, &qc);
  ASSERT_TRUE(a.cm.connect(c2, {}).ok());
  deliver();
  Id* s2 = request_of_b();
  ASSERT_NE(s2, s);
  b.cm.set_qp(s2, &qs);
  b.rec.events.clear();
  ASSERT_TRUE(b.cm.accept(s2, {}).ok());
  auto drop = [](const Sent& m) { return m.attr() == AttrId::rep ? 0 : 1; };
  ASSERT_TRUE(run_until([&] { return !b.rec.of(s2).empty(); }, ms(3000), drop));
  EXPECT_EQ(b.rec.of(s2), (std::vector<ET>{ET::unreachable}));
  EXPECT_EQ(b.rec.last(ET::unreachable)->status, -ETIMEDOUT);
  // The active side gives up too (its REQ retries, or b's REJ "timeout").
  ASSERT_TRUE(run_until([&] { return !a.rec.of(c2).empty(); }, ms(1000), drop));
  const ET end = a.rec.of(c2).back();
  EXPECT_TRUE(end == ET::rejected || end == ET::unreachable) << to_string(end);
}

TEST_F(Cm_, VanishedPeerDisconnectsAfterDreqRetries) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(a.cm.disconnect(c).ok());
  auto drop_all = [](const Sent&) { return 0; };  // b is gone
  EXPECT_FALSE(run_until([&, c = c] { return a.rec.of(c).size() > 1; }, ms(1150), drop_all));
  ASSERT_TRUE(run_until([&, c = c] { return a.rec.of(c).size() > 1; }, ms(300), drop_all));
  EXPECT_EQ(a.rec.of(c).back(), ET::disconnected);
  EXPECT_EQ(wire.count(AttrId::dreq), 4u);
  advance(ms(600));
  EXPECT_EQ(a.rec.of(c).back(), ET::timewait_exit);
}

TEST_F(Cm_, SimultaneousDisconnect) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(a.cm.disconnect(c).ok());
  ASSERT_TRUE(b.cm.disconnect(s).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established, ET::disconnected}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
  EXPECT_EQ(c->state(), State::timewait);
  EXPECT_EQ(s->state(), State::timewait);
  // Each DREQ was answered; nothing is retried.
  advance(ms(400));
  deliver();
  EXPECT_EQ(wire.count(AttrId::dreq), 2u);
}

TEST_F(Cm_, DestroyingAnEstablishedIdDisconnectsThePeer) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  a.cm.set_qp(c, nullptr);
  a.cm.destroy_id(c);
  deliver();
  EXPECT_EQ(b.rec.of(s).back(), ET::disconnected);
  ASSERT_TRUE(b.cm.disconnect(s).ok());
  deliver();
  EXPECT_EQ(wire.count(AttrId::drep), 1u);
  EXPECT_EQ(a.cm.conn_count(), 1u);  // in timewait without its id
  advance(ms(600));
  EXPECT_EQ(a.cm.conn_count(), 0u);
  EXPECT_TRUE(a.rec.of(c).size() == 1);  // nothing after the id went
}

TEST_F(Cm_, DreqAfterTimewaitIsAnsweredWithDrep) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(a.cm.disconnect(c).ok());
  deliver();
  ASSERT_TRUE(b.cm.disconnect(s).ok());
  // The DREP is lost: a retries the DREQ, b (in timewait) answers again.
  deliver([](const Sent& m) { return m.attr() == AttrId::drep ? 0 : 1; });
  advance(ms(400));
  deliver();
  EXPECT_EQ(wire.count(AttrId::drep), 2u);
  EXPECT_EQ(a.rec.of(c).back(), ET::disconnected);
}

// CM MADs are not authenticated: a third host that learned (or guessed) the
// comm IDs of a connection sends its messages from its own address, and
// they are ignored; the same message from the peer still counts.
TEST_F(Cm_, MadsAboutAConnectionCountOnlyFromItsPeer) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(a.cm.disconnect(c).ok());
  ASSERT_EQ(wire.queue.size(), 1u);
  Sent dreq = wire.queue.front();
  ASSERT_EQ(dreq.attr(), AttrId::dreq);
  wire.queue.pop_front();
  const size_t drep_before = wire.count(AttrId::drep);
  for (const char* forger : {"10.0.0.66", "10.0.0.2"}) {
    GsiMad m;
    m.data = dreq.mad;
    m.src = {*IpAddr::parse(forger), 4791};
    m.dst = dreq.dst.addr;
    m.src_qp = 1;
    b.cm.on_mad(b.port, m);
  }
  EXPECT_EQ(s->state(), State::established) << "a forged DREQ tears nothing down";
  EXPECT_EQ(b.rec.of(s).back(), ET::established);
  EXPECT_TRUE(wire.queue.empty()) << "and draws no answer";
  EXPECT_EQ(b.cm.foreign_mads(), 2u);
  wire.queue.push_back(dreq);  // the peer's own
  deliver();
  EXPECT_EQ(b.rec.of(s).back(), ET::disconnected);
  EXPECT_EQ(wire.count(AttrId::drep), drep_before);  // b answers with its own DREQ later, on disconnect
}

TEST_F(Cm_, QpFailureOnRepGivesConnectErrorAndRej) {
  listen_b();
  Id* c = resolved_a();
  qa.fail_at = QpState::rtr;
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::connect_error}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::rejected}));
}

TEST_F(Cm_, BacklogFullRejects) {
  Id* l = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(b.cm.bind(l, {*IpAddr::parse("10.0.0.1"), 7000}).ok());
  ASSERT_TRUE(b.cm.listen(l, 1).ok());
  Id* c1 = resolved_a();
  a.cm.set_qp(c1, &qa);
  ASSERT_TRUE(a.cm.connect(c1, {}).ok());
  FakeQp q2(0x4009);
  Id* c2 = resolved_a();
  a.cm.set_qp(c2, &q2);
  ASSERT_TRUE(a.cm.connect(c2, {}).ok());
  deliver();
  EXPECT_EQ(b.rec.types(), (std::vector<ET>{ET::connect_request}));
  EXPECT_EQ(a.rec.of(c2), (std::vector<ET>{ET::rejected}));
  EXPECT_EQ(a.rec.of(c1), (std::vector<ET>{}));
}

TEST_F(Cm_, DestroyingARequestRejectsIt) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  b.cm.destroy_id(s);
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::rejected}));
  EXPECT_EQ(a.rec.last(ET::rejected)->status, int(RejReason::consumer_reject));
}

}  // namespace
}  // namespace uroce::cm::test
