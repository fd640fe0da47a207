// Rows of the CM's transition table (src/cm/fsm.hpp) that the handshake and
// failure tests do not reach, each driven between two fake processes: the
// state both ids end in, the events, and the MADs on the wire.
#include "cm_fixture.hpp"

namespace uroce::cm::test {
namespace {

// rep_sent --DREQ--> dreq_rcvd: the active side is established and
// disconnects before its RTU arrives; the passive side gets DISCONNECTED
// with no ESTABLISHED before it, and both end in timewait, then closed.
TEST_F(Cm_, DreqWhileRepSentDisconnectsWithoutEstablished) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver([](const Sent& m) { return m.attr() == AttrId::rtu ? 0 : 1; });  // the RTU is lost
  EXPECT_EQ(b.cm.view(s).state, State::rep_sent);
  EXPECT_EQ(a.cm.view(c).state, State::established);
  bool follows = false;
  ASSERT_TRUE(a.cm.disconnect(c, &follows).ok());
  EXPECT_TRUE(follows);
  EXPECT_EQ(a.cm.view(c).state, State::dreq_sent);
  deliver();
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::disconnected}));
  EXPECT_EQ(b.cm.view(s).state, State::dreq_rcvd);
  ASSERT_TRUE(b.cm.disconnect(s, &follows).ok());
  EXPECT_EQ(b.cm.view(s).state, State::timewait);
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established, ET::disconnected}));
  EXPECT_EQ(a.cm.view(c).state, State::timewait);
  ASSERT_TRUE(
      run_until([&] { return a.cm.view(c).state == State::closed && b.cm.view(s).state == State::closed; }, ms(5000)));
  EXPECT_EQ(a.rec.of(c).back(), ET::timewait_exit);
  EXPECT_EQ(b.rec.of(s).back(), ET::timewait_exit);
  EXPECT_EQ(a.cm.conn_count(), 0u);
  EXPECT_EQ(b.cm.conn_count(), 0u);
}

// req_sent --destroy--> closed: the passive side considering the request
// gets REJECTED (reason timeout, as the active side gave up waiting).
TEST_F(Cm_, DestroyWhileRequestingRejectsTheRequest) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  a.cm.destroy_id(c);
  EXPECT_EQ(a.cm.conn_count(), 0u);
  deliver();
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::rejected}));
  EXPECT_EQ(b.rec.last(ET::rejected)->status, int(RejReason::timeout));
  EXPECT_EQ(b.cm.view(s).state, State::closed);
  EXPECT_FALSE(b.cm.accept(s, {}).ok()) << "accept after the request was withdrawn";
}

// rep_rcvd --reject--> closed (kept): the application that moves its own QP
// turns the REP down; the active side's record stays to answer a repeated
// REP with the same REJ.
TEST_F(Cm_, RejectingAReplyKeepsTheRecordForDuplicates) {
  listen_b();
  Id* c = resolved_a();
  ConnParam cp;
  cp.qp_num = 0x4002;  // no QP attached: CONNECT_RESPONSE, then establish or reject
  ASSERT_TRUE(a.cm.connect(c, cp).ok());
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::connect_response}));
  EXPECT_EQ(a.cm.view(c).state, State::rep_rcvd);
  ASSERT_TRUE(a.cm.reject(c, bytes("no")).ok());
  EXPECT_EQ(a.cm.view(c).state, State::closed);
  EXPECT_EQ(a.cm.conn_count(), 1u) << "the record is kept for duplicates";
  deliver();
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::rejected}));
  EXPECT_EQ(b.rec.last(ET::rejected)->status, int(RejReason::consumer_reject));
  EXPECT_EQ(wire.count(AttrId::rej), 1u);
  EXPECT_FALSE(a.cm.establish(c).ok());
}

// An id that carries no connection refuses what needs one, naming its
// state, and keeps its state.
TEST_F(Cm_, OperationsOutOfStateAreRefusedAndChangeNothing) {
  Id* i = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  auto refused = [&](Status st, const char* what) {
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), EINVAL) << what << ": " << st.to_string();
    EXPECT_EQ(a.cm.view(i).state, State::idle) << what;
  };
  refused(a.cm.connect(i, {}), "connect");
  refused(a.cm.accept(i, {}), "accept");
  refused(a.cm.reject(i, {}), "reject");
  refused(a.cm.establish(i), "establish");
  refused(a.cm.disconnect(i, nullptr), "disconnect");
  refused(a.cm.resolve_route(i), "resolve_route");
  const Status st = a.cm.connect(i, {});
  EXPECT_NE(st.to_string().find("idle"), std::string::npos) << st.to_string();
  ASSERT_TRUE(a.cm.bind(i, {*IpAddr::parse("10.0.0.1"), 7300}).ok());
  EXPECT_EQ(a.cm.view(i).state, State::addr_bound);
  EXPECT_EQ(a.cm.bind(i, {*IpAddr::parse("10.0.0.1"), 7301}).code(), EINVAL);
  ASSERT_TRUE(a.cm.listen(i, 4).ok());
  EXPECT_EQ(a.cm.view(i).state, State::listen);
  EXPECT_EQ(a.cm.resolve_addr(i, std::nullopt, {*IpAddr::parse("10.0.0.1"), 7000}).code(), EINVAL);
  EXPECT_EQ(a.cm.view(i).state, State::listen);
  EXPECT_TRUE(wire.log.empty());
}

// disconnect says whether an event follows: DISCONNECTED for the first, not
// for one already under way; in dreq_rcvd the DREP leads to timewait.
TEST_F(Cm_, DisconnectSaysWhetherAnEventFollows) {
  auto [c, s] = connect_pair();
  ASSERT_NE(s, nullptr);
  bool follows = false;
  ASSERT_TRUE(a.cm.disconnect(c, &follows).ok());
  EXPECT_TRUE(follows);
  follows = true;
  ASSERT_TRUE(a.cm.disconnect(c, &follows).ok());
  EXPECT_FALSE(follows);
  EXPECT_EQ(a.cm.view(c).state, State::dreq_sent);
  EXPECT_EQ(wire.count(AttrId::dreq), 1u);
  EXPECT_EQ(qa.mods.back().qp_state, QpState::err);
}

// A SIDR exchange that succeeds leaves the ids established (what rdma_cm
// shows) though both records are closed: the passive one kept to answer a
// repeated SIDR_REQ, the active one gone.
TEST_F(Cm_, SidrLeavesTheIdsEstablished) {
  listen_b(7100, QpType::ud);
  Id* c = resolved_a(7100, QpType::ud);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  EXPECT_EQ(a.cm.view(c).state, State::sidr_req_sent);
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(b.cm.view(s).state, State::sidr_req_rcvd);
  FakeQp ud(0x8005);
  b.cm.set_qp(s, &ud);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  EXPECT_EQ(b.cm.view(s).state, State::established);
  EXPECT_EQ(b.cm.conn_count(), 1u);
  deliver();
  EXPECT_EQ(a.cm.view(c).state, State::established);
  EXPECT_EQ(a.cm.conn_count(), 0u);
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
}

}  // namespace
}  // namespace uroce::cm::test
