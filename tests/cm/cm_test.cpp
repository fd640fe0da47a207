// The CM state machine between two processes of a fake host (cm_harness.hpp):
// the handshake and teardown MAD by MAD, QP transitions, events; lost,
// duplicated and slow MADs (retries, MRA, timeouts); REJ; SIDR; addressing.
#include <gtest/gtest.h>

#include <cerrno>

#include "cm_harness.hpp"

namespace uroce::cm::test {
namespace {

using ET = EventType;
using ms = std::chrono::milliseconds;

std::vector<uint8_t> bytes(const char* s) { return std::vector<uint8_t>(s, s + std::strlen(s)); }

class Cm_ : public CmWorld {
 protected:
  FakeQp qa{0x4002}, qb{0x8002};

  // Connects a (QP qa) to b (QP qb); returns {client id, server child}.
  std::pair<Id*, Id*> connect_pair(ConnParam cp = {}, ConnParam ap = {}) {
    listen_b();
    Id* c = resolved_a();
    a.cm.set_qp(c, &qa);
    EXPECT_TRUE(a.cm.connect(c, cp).ok());
    deliver();
    Id* s = request_of_b();
    EXPECT_NE(s, nullptr);
    if (!s) return {c, nullptr};
    b.cm.set_qp(s, &qb);
    EXPECT_TRUE(b.cm.accept(s, ap).ok());
    deliver();
    return {c, s};
  }
};

TEST_F(Cm_, HandshakeAndTeardownMadByMad) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ConnParam cp;
  cp.responder_resources = 4;
  cp.initiator_depth = 2;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  const auto hello = bytes("hello");
  cp.private_data = hello;
  ASSERT_TRUE(a.cm.connect(c, cp).ok());
  ASSERT_EQ(wire.queue.size(), 1u);
  const Sent req_sent = wire.queue.front();
  EXPECT_EQ(req_sent.attr(), AttrId::req);
  EXPECT_EQ(req_sent.dst, (Endpoint{*IpAddr::parse("10.0.0.1"), 50000}));  // the listener's process
  Req req;
  ASSERT_TRUE(decode(req_sent.mad, req));
  EXPECT_EQ(req.service_id, service_id(kPsTcp, 7000));
  EXPECT_EQ(req.local_qpn, 0x4002u);
  EXPECT_EQ(req.local_comm_id >> 22, 1u);  // our slot
  EXPECT_EQ(req.responder_resources, 4);
  EXPECT_EQ(req.initiator_depth, 2);
  EXPECT_EQ(req.retry_count, 5);
  EXPECT_EQ(req.rnr_retry_count, 6);
  EXPECT_EQ(req.path_mtu, 5);
  EXPECT_EQ(req.primary.local_lid, 0xffff);
  IpCmHeader ip;
  ASSERT_TRUE(decode_ip_header(req.private_data, ip));
  EXPECT_EQ(ip.dst, *IpAddr::parse("10.0.0.1"));
  EXPECT_NE(ip.src_port, 0);
  EXPECT_EQ(std::string(req.private_data.begin() + 36, req.private_data.begin() + 41), "hello");

  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  const Event& creq = *b.rec.last(ET::connect_request);
  EXPECT_EQ(creq.private_data.size(), 56u);
  EXPECT_EQ(std::string(creq.private_data.begin(), creq.private_data.begin() + 5), "hello");
  EXPECT_EQ(creq.responder_resources, 2);  // swapped: what the peer asks of us
  EXPECT_EQ(creq.initiator_depth, 4);
  EXPECT_EQ(creq.qp_num, 0x4002u);
  EXPECT_EQ(s->dst().port, ip.src_port);
  EXPECT_EQ(s->src().port, 7000);
  EXPECT_EQ(s->state(), State::req_rcvd);

  // rdma_init_qp_attr on the passive side before accept: the REQ's values.
  QpAttrs rtr;
  rtr.qp_state = QpState::rtr;
  ASSERT_TRUE(b.cm.init_qp_attr(s, rtr).ok());
  EXPECT_EQ(rtr.dest_qp_num, 0x4002u);
  // A REQ's or REP's Starting PSN is the first PSN its sender expects to
  // receive, as Linux's CM has it (tests/data/rxe_rping.pcap: rxe's active
  // side sends from the REP's PSN, its passive side from the REQ's).
  const uint32_t b_rq_psn = rtr.rq_psn;  // announced in b's REP below
  QpAttrs b_rts;
  b_rts.qp_state = QpState::rts;
  ASSERT_TRUE(b.cm.init_qp_attr(s, b_rts).ok());
  EXPECT_EQ(b_rts.sq_psn, req.starting_psn);
  EXPECT_EQ(rtr.path_mtu, 5);
  EXPECT_EQ(rtr.dgid, *IpAddr::parse("10.0.0.1"));

  b.cm.set_qp(s, &qb);
  ConnParam ap;
  ap.responder_resources = 2;
  ap.initiator_depth = 4;
  ap.rnr_retry_count = 3;
  ASSERT_TRUE(b.cm.accept(s, ap).ok());
  EXPECT_EQ(qb.states(), (std::vector<QpState>{QpState::init, QpState::rtr, QpState::rts}));
  EXPECT_EQ(qb.mods[1].dest_qp_num, 0x4002u);
  EXPECT_EQ(qb.mods[1].max_dest_rd_atomic, 2);
  EXPECT_EQ(qb.mods[2].max_rd_atomic, 4);
  EXPECT_EQ(qb.mods[2].retry_cnt, 5);  // the active's retry count
  EXPECT_EQ(qb.mods[2].rnr_retry, 6);  // the active's RNR retry
  ASSERT_EQ(wire.queue.size(), 1u);
  EXPECT_EQ(wire.queue.front().attr(), AttrId::rep);
  EXPECT_EQ(wire.queue.front().dst, (Endpoint{*IpAddr::parse("10.0.0.1"), 4791}));
  Rep rep;
  ASSERT_TRUE(decode(wire.queue.front().mad, rep));
  EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
  EXPECT_EQ(rep.local_qpn, 0x8002u);
  EXPECT_EQ(rep.starting_psn, b_rq_psn);
  EXPECT_EQ(qb.mods[1].rq_psn, rep.starting_psn);
  EXPECT_EQ(qb.mods[2].sq_psn, req.starting_psn);

  deliver();  // REP -> a; a's QP to RTS, RTU -> b
  EXPECT_EQ(qa.states(), (std::vector<QpState>{QpState::init, QpState::rtr, QpState::rts}));
  EXPECT_EQ(qa.mods[1].dest_qp_num, 0x8002u);
  EXPECT_EQ(qa.mods[1].rq_psn, req.starting_psn);
  EXPECT_EQ(qa.mods[2].sq_psn, rep.starting_psn);
  EXPECT_EQ(qa.mods[2].rnr_retry, 3);      // from the REP
  EXPECT_EQ(qa.mods[2].max_rd_atomic, 2);  // min(our 2, their responder resources 2)
  EXPECT_EQ(qa.mods[1].max_dest_rd_atomic, 4);
  EXPECT_EQ(qa.mods[1].dgid, *IpAddr::parse("10.0.0.1"));
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
  EXPECT_EQ(c->state(), State::established);
  EXPECT_EQ(s->state(), State::established);
  EXPECT_EQ(wire.count(AttrId::rtu), 1u);

  // Teardown: DREQ from a, DREP from b.
  bool follows = false;
  ASSERT_TRUE(a.cm.disconnect(c, &follows).ok());
  EXPECT_TRUE(follows);
  EXPECT_EQ(qa.states().back(), QpState::err);
  deliver();
  EXPECT_EQ(b.rec.of(s).back(), ET::disconnected);
  EXPECT_EQ(a.rec.of(c).size(), 1u);  // no DREP yet: b's application has not answered
  ASSERT_TRUE(b.cm.disconnect(s, &follows).ok());
  EXPECT_EQ(qb.states().back(), QpState::err);
  deliver();
  EXPECT_EQ(a.rec.of(c).back(), ET::disconnected);
  EXPECT_EQ(wire.count(AttrId::dreq), 1u);
  EXPECT_EQ(wire.count(AttrId::drep), 1u);
  EXPECT_EQ(c->state(), State::timewait);

  // Timewait ends with TIMEWAIT_EXIT, and the records go.
  advance(ms(600));
  EXPECT_EQ(a.rec.of(c).back(), ET::timewait_exit);
  EXPECT_EQ(b.rec.of(s).back(), ET::timewait_exit);
  EXPECT_EQ(a.cm.conn_count(), 0u);
  EXPECT_EQ(b.cm.conn_count(), 0u);
  // Every MAD of the exchange was sent once.
  EXPECT_EQ(wire.log.size(), 5u);
}

TEST_F(Cm_, NoListenerAnswersRejInvalidServiceId) {
  listen_b(7000);
  Id* c = resolved_a(7001);  // nobody listens on 7001
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  // Nobody listens: after looking for a listener of this host for 100 ms,
  // the REQ goes to the owner of 4791 (a itself here), which holds it
  // another 100 ms (a listener may be coming), then rejects it.
  const auto t0 = clock.t;
  ASSERT_TRUE(run_until([&] { return !a.rec.of(c).empty(); }, ms(400)));
  EXPECT_GE(clock.t - t0, ms(190));
  EXPECT_EQ(wire.count(AttrId::req), 1u);
  EXPECT_EQ(wire.log.front().dst.port, 4791);
  ASSERT_EQ(a.rec.of(c), (std::vector<ET>{ET::rejected}));
  EXPECT_EQ(a.rec.last(ET::rejected)->status, int(RejReason::invalid_service_id));
  EXPECT_EQ(c->state(), State::closed);
  EXPECT_EQ(a.cm.conn_count(), 0u);
  EXPECT_TRUE(b.rec.events.empty());
}

TEST_F(Cm_, ARequestToThisHostWaitsForItsListener) {
  // The client is told to connect before the server listens (perftest does
  // this): the REQ leaves when the listener appears in the directory.
  Id* c = resolved_a(7000);
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  advance(ms(30));
  EXPECT_TRUE(wire.queue.empty());
  listen_b(7000);
  advance(ms(10));
  ASSERT_EQ(wire.queue.size(), 1u);
  EXPECT_EQ(wire.queue.front().dst.port, 50000);
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
}

TEST_F(Cm_, ARequestJustBeforeListenIsHeldForTheListener) {
  // The directory already shows b's listener, b's CM not yet: b holds the
  // REQ until its listen.
  host.listeners[{*IpAddr::parse("10.0.0.1"), service_id(kPsTcp, 7000)}] = 2;
  Id* c = resolved_a(7000);
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  EXPECT_EQ(wire.queue.front().dst.port, 50000);
  deliver();
  advance(ms(30));
  host.listeners.clear();
  listen_b(7000);
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(wire.count(AttrId::rej), 0u);
}

TEST_F(Cm_, ConsumerRejectCarriesPrivateData) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  const auto why = bytes("go away");
  ASSERT_TRUE(b.cm.reject(s, why).ok());
  deliver();
  const Event* e = a.rec.last(ET::rejected);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, int(RejReason::consumer_reject));
  EXPECT_EQ(std::string(e->private_data.begin(), e->private_data.begin() + 7), "go away");
  EXPECT_TRUE(qa.mods.empty());
  // A repeated REQ (our REJ lost) gets the same REJ again.
  ASSERT_TRUE(b.cm.accept(s, {}).code() == EINVAL);
}

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
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver([](const Sent& m) { return m.attr() == AttrId::rep ? 0 : 1; });  // REP lost
  EXPECT_TRUE(a.rec.events.empty());
  int rtus = 0;
  ASSERT_TRUE(run_until([&] { return b.rec.of(s).size() == 2; }, ms(2000),
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
  EXPECT_EQ(b.rec.of(s),
            (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected, ET::timewait_exit}));
  EXPECT_EQ(qa.mods.size(), 4u);
  EXPECT_EQ(qb.mods.size(), 4u);
}

TEST_F(Cm_, SlowAcceptDrawsMraAndTheActiveWaits) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
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
  EXPECT_FALSE(run_until([&] { return a.rec.of(c).size() > 1; }, ms(1150), drop_all));
  ASSERT_TRUE(run_until([&] { return a.rec.of(c).size() > 1; }, ms(300), drop_all));
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

TEST_F(Cm_, WithoutQpTheApplicationEstablishes) {
  listen_b();
  Id* c = resolved_a();
  ConnParam cp;
  cp.qp_num = 0x4777;
  QpAttrs early;
  early.qp_state = QpState::rtr;
  EXPECT_EQ(a.cm.init_qp_attr(c, early).code(), EINVAL);
  ASSERT_TRUE(a.cm.connect(c, cp).ok());
  EXPECT_EQ(a.cm.init_qp_attr(c, early).code(), EINVAL);  // no REP yet
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  ConnParam ap;
  ap.qp_num = 0x8777;
  ASSERT_TRUE(b.cm.accept(s, ap).ok());
  deliver();
  ASSERT_EQ(a.rec.of(c), (std::vector<ET>{ET::connect_response}));
  EXPECT_EQ(a.rec.last(ET::connect_response)->qp_num, 0x8777u);
  QpAttrs rtr, rts;
  rtr.qp_state = QpState::rtr;
  rts.qp_state = QpState::rts;
  ASSERT_TRUE(a.cm.init_qp_attr(c, rtr).ok());
  ASSERT_TRUE(a.cm.init_qp_attr(c, rts).ok());
  EXPECT_EQ(rtr.dest_qp_num, 0x8777u);
  EXPECT_NE(rtr.mask & qp_mask::kAv, 0u);
  EXPECT_NE(rts.mask & qp_mask::kSqPsn, 0u);
  // A REP repeated while the application decides draws an MRA.
  advance(ms(400));
  deliver();
  EXPECT_EQ(wire.count(AttrId::mra), 1u);
  ASSERT_TRUE(a.cm.establish(c).ok());
  deliver();
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
  EXPECT_EQ(c->state(), State::established);
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
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.destroy_id(s);
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::rejected}));
  EXPECT_EQ(a.rec.last(ET::rejected)->status, int(RejReason::consumer_reject));
}

// ------------------------------------------------------------------ SIDR

TEST_F(Cm_, SidrResolvesQpnAndQkey) {
  listen_b(7100, QpType::ud);
  Id* c = resolved_a(7100, QpType::ud);
  const auto pd = bytes("udp?");
  ConnParam cp;
  cp.private_data = pd;
  ASSERT_TRUE(a.cm.connect(c, cp).ok());
  EXPECT_EQ(wire.queue.front().attr(), AttrId::sidr_req);
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  const Event& creq = *b.rec.last(ET::connect_request);
  EXPECT_TRUE(creq.ud);
  EXPECT_EQ(std::string(creq.private_data.begin(), creq.private_data.begin() + 4), "udp?");
  EXPECT_EQ(creq.ud_dgid, *IpAddr::parse("10.0.0.1"));
  FakeQp ud(0x8005);
  b.cm.set_qp(s, &ud);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  EXPECT_TRUE(ud.mods.empty());  // a UD QP is ready before accept
  deliver();
  const Event* est = a.rec.last(ET::established);
  ASSERT_NE(est, nullptr);
  EXPECT_TRUE(est->ud);
  EXPECT_EQ(est->qp_num, 0x8005u);
  EXPECT_EQ(est->qkey, kRdmaUdpQkey);
  EXPECT_EQ(est->ud_dgid, *IpAddr::parse("10.0.0.1"));
  EXPECT_EQ(a.cm.conn_count(), 0u);
  // A repeated SIDR_REQ (our SIDR_REP lost) gets the same answer.
  SidrReq again;
  ASSERT_TRUE(decode(wire.log.front().mad, again));
  wire.queue.push_back(wire.log.front());
  deliver();
  EXPECT_EQ(wire.count(AttrId::sidr_rep), 2u);
  EXPECT_EQ(b.rec.types(), (std::vector<ET>{ET::connect_request}));
}

TEST_F(Cm_, SidrWithoutListenerIsUnreachable) {
  listen_b(7100, QpType::ud);
  Id* c = resolved_a(7101, QpType::ud);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  ASSERT_TRUE(run_until([&] { return !a.rec.of(c).empty(); }, ms(400)));
  const Event* e = a.rec.last(ET::unreachable);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, int(SidrStatus::sid_not_supported));
}

TEST_F(Cm_, SidrLostIsRetriedThenTimesOut) {
  listen_b(7100, QpType::ud);
  Id* c = resolved_a(7100, QpType::ud);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  auto drop = [](const Sent& m) { return m.attr() == AttrId::sidr_req ? 0 : 1; };
  ASSERT_TRUE(run_until([&] { return !a.rec.events.empty(); }, ms(2000), drop));
  EXPECT_EQ(a.rec.last(ET::unreachable)->status, -ETIMEDOUT);
  EXPECT_EQ(wire.count(AttrId::sidr_req), 4u);
}

TEST_F(Cm_, SidrRejected) {
  listen_b(7100, QpType::ud);
  Id* c = resolved_a(7100, QpType::ud);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(b.cm.reject(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.last(ET::unreachable)->status, int(SidrStatus::rejected));
}

// ------------------------------------------------------------------ addresses

TEST_F(Cm_, BindListenAndResolve) {
  Id* l1 = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(b.cm.bind(l1, {IpAddr::from_v4(0), 0}).ok());  // ephemeral port
  EXPECT_GE(l1->src().port, 32768);
  ASSERT_TRUE(b.cm.listen(l1, 0).ok());
  Id* l2 = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  EXPECT_EQ(b.cm.bind(l2, {*IpAddr::parse("10.0.0.1"), l1->src().port}).code(), EADDRINUSE);
  Id* l3 = b.cm.create_id(nullptr, kPsUdp, QpType::ud);
  EXPECT_TRUE(b.cm.bind(l3, {*IpAddr::parse("10.0.0.1"), l1->src().port}).ok());  // another port space
  Id* l4 = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  EXPECT_EQ(b.cm.bind(l4, {*IpAddr::parse("10.9.9.9"), 1}).code(), ENODEV);  // no such device
  // The other process cannot listen there either (the host directory).
  Id* l5 = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(a.cm.bind(l5, {IpAddr::from_v4(0), l1->src().port}).ok());
  EXPECT_EQ(a.cm.listen(l5, 0).code(), EADDRINUSE);

  Id* c = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  EXPECT_EQ(a.cm.resolve_route(c).code(), EINVAL);
  ASSERT_TRUE(a.cm.resolve_addr(c, std::nullopt, {*IpAddr::parse("10.0.0.1"), l1->src().port}).ok());
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::addr_resolved}));
  EXPECT_EQ(c->port(), &a.port);
  EXPECT_EQ(c->src().addr, *IpAddr::parse("10.0.0.1"));
  EXPECT_NE(c->src().port, 0);
  ASSERT_TRUE(a.cm.resolve_route(c).ok());
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::addr_resolved, ET::route_resolved}));
  EXPECT_EQ(c->path_mtu(), 5);
  EXPECT_EQ(a.cm.connect(a.cm.create_id(nullptr, kPsTcp, QpType::rc), {}).code(), EINVAL);  // no route

  Id* v6 = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(a.cm.resolve_addr(v6, std::nullopt, {*IpAddr::parse("fd00::1"), 1}).ok());
  EXPECT_EQ(a.rec.of(v6), (std::vector<ET>{ET::addr_error}));  // no IPv6 device
}

TEST_F(Cm_, WildcardListenerTakesRequestsAndRepliesGoToTheSender) {
  Id* l = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(b.cm.bind(l, {IpAddr::from_v4(0), 7200}).ok());
  ASSERT_TRUE(b.cm.listen(l, 0).ok());
  Id* c = resolved_a(7200);
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  EXPECT_EQ(wire.queue.front().dst.port, 50000);
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(b.rec.last(ET::connect_request)->listen_id, l);
  EXPECT_EQ(s->src().addr, *IpAddr::parse("10.0.0.1"));  // the address it came to
  EXPECT_EQ(s->port(), &b.port);
}


// A process of this host that dies sends no DREQ or REJ (a kernel CM would
// send them for it): the registry shows it gone, and its peer's Cm acts as
// if they had come, within its peer check interval (250 ms).
TEST_F(Cm_, DeadPeerProcessGivesDisconnected) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  advance(ms(1000));  // alive: nothing happens
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
  host.ports.erase({2, *IpAddr::parse("10.0.0.1")});  // b is killed
  nodes = {&a};
  EXPECT_FALSE(run_until([&] { return a.rec.of(c).size() > 1; }, ms(200)));  // nothing to wake it before
  ASSERT_TRUE(run_until([&] { return a.rec.of(c).size() > 1; }, ms(100)));
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established, ET::disconnected}));
  EXPECT_EQ(c->state(), State::dreq_rcvd);
  ASSERT_TRUE(a.cm.disconnect(c).ok());  // DREP into the void, then timewait
  EXPECT_EQ(c->state(), State::timewait);
  advance(ms(600));
  EXPECT_EQ(a.rec.of(c).back(), ET::timewait_exit);
  EXPECT_EQ(a.cm.conn_count(), 0u);
}

TEST_F(Cm_, DeadActivePeerProcessGivesDisconnectedToThePassive) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  host.ports.erase({1, *IpAddr::parse("10.0.0.1")});  // a (on 4791) is killed
  nodes = {&b};
  ASSERT_TRUE(run_until([&] { return b.rec.of(s).size() > 2; }, ms(300)));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
}

TEST_F(Cm_, PeerProcessDyingInTheHandshakeGivesRejected) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  wire.queue.clear();  // the REP is lost and a dies
  host.ports.erase({1, *IpAddr::parse("10.0.0.1")});
  nodes = {&b};
  ASSERT_TRUE(run_until([&] { return b.rec.of(s).size() > 1; }, ms(300)));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::rejected}));
  EXPECT_EQ(b.rec.last(ET::rejected)->status, int(RejReason::consumer_reject));
  EXPECT_EQ(b.cm.conn_count(), 0u);
}

TEST_F(Cm_, PeerOfAnotherHostIsNotCheckedForLife) {
  // When b hears a's REQ, the registry does not show a's slot on the port
  // the REQ came from (as for a process elsewhere whose comm ID merely looks
  // like a slot of ours): b never judges a by the registry.
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  host.ports[{1, *IpAddr::parse("10.0.0.1")}] = 4792;
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  host.ports.erase({1, *IpAddr::parse("10.0.0.1")});
  nodes = {&b};
  advance(ms(2000));
  deliver();
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established}));
}


// A peer the registry cannot vouch for (another host) is probed every
// second; while its CM answers, nothing happens; three probes unanswered and
// its connections end with DISCONNECTED.
TEST_F(Cm_, KeepAliveEndsConnectionsToASilentPeerOfAnotherHost) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  host.ports[{1, *IpAddr::parse("10.0.0.1")}] = 4792;  // b cannot tell a's process by the registry
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_FALSE(run_until([&] { return b.rec.of(s).size() > 2; }, ms(5000)));
  EXPECT_GE(wire.count(AttrId::class_port_info), 6u);  // probes and their answers
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  nodes = {&b};  // a's host goes silent
  ASSERT_TRUE(run_until([&] { return b.rec.of(s).size() > 2; }, ms(4500)));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
}

// A uroce CM asked about a comm ID whose process is gone from its host
// answers so (status 0x1c): the prober ends the connections at once.
TEST_F(Cm_, KeepAliveAnsweredGoneEndsAtOnce) {
  listen_b();
  Id* c = resolved_a();
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  host.ports[{1, *IpAddr::parse("10.0.0.1")}] = 4792;
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  // a's connection record goes without a word (its id destroyed, the DREQ
  // lost, the timewait over): a's CM no longer knows the comm ID.
  a.cm.set_qp(c, nullptr);
  a.cm.destroy_id(c);
  wire.queue.clear();
  auto drop_dreq = [](const Sent& m) { return m.attr() == AttrId::dreq ? 0 : 1; };
  ASSERT_TRUE(run_until([&] { return b.rec.of(s).size() > 2; }, ms(3000), drop_dreq));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
}

}  // namespace
}  // namespace uroce::cm::test
