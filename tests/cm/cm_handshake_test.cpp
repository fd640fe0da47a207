// The CM state machine, the handshake: REQ/REP/RTU and DREQ/DREP MAD by MAD,
// QP transitions and events; requests without a listener, or before it;
// REJ with private data; an application that establishes without a QP.
#include "cm_fixture.hpp"

namespace uroce::cm::test {
namespace {

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
  rtr.min_rnr_timer = 31;
  ASSERT_TRUE(b.cm.init_qp_attr(s, rtr).ok());
  EXPECT_EQ(rtr.dest_qp_num, 0x4002u);
  // The RNR timer the kernel's CM gives (cm_init_qp_rtr_attr): 0, 655.36 ms.
  EXPECT_NE(rtr.mask & qp_mask::kMinRnrTimer, 0u);
  EXPECT_EQ(rtr.min_rnr_timer, 0);
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
  Id* s = request_to_b(c);
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

}  // namespace
}  // namespace uroce::cm::test
