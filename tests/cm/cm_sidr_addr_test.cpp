// The CM state machine: SIDR (UD service resolution), binding, listening and
// resolving addresses, and the liveness of peers (dead processes of this
// host, keep-alive probes of another host's).
#include <set>
#include <vector>

#include "cm_fixture.hpp"

namespace uroce::cm::test {
namespace {

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

// Thousands of ids, bound explicitly or by resolving: each port is taken
// once per port space, and a destroyed id's port is free again.
TEST_F(Cm_, ManyIdsTakeDistinctPortsAndFreeThemWhenDestroyed) {
  std::set<uint16_t> ports;
  std::vector<Id*> ids;
  for (int i = 0; i < 3000; ++i) {
    Id* c = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
    ASSERT_TRUE(a.cm.resolve_addr(c, std::nullopt, {*IpAddr::parse("10.0.0.2"), 7300}).ok());
    ASSERT_TRUE(ports.insert(c->src().port).second) << "port " << c->src().port << " handed out twice";
    ids.push_back(c);
  }
  const uint16_t taken = ids[1234]->src().port;
  Id* other = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  EXPECT_EQ(a.cm.bind(other, {IpAddr::from_v4(0), taken}).code(), EADDRINUSE);
  Id* udp = a.cm.create_id(nullptr, kPsUdp, QpType::ud);
  EXPECT_TRUE(a.cm.bind(udp, {IpAddr::from_v4(0), taken}).ok());  // another port space
  a.cm.destroy_id(ids[1234]);
  EXPECT_TRUE(a.cm.bind(other, {IpAddr::from_v4(0), taken}).ok());
  Id* third = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  EXPECT_EQ(a.cm.bind(third, {IpAddr::from_v4(0), taken}).code(), EADDRINUSE);  // taken again
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

// A loopback address no device holds binds to the (first) device, and a
// loopback destination loops back to the device's own address, as the
// kernel's rdma_cm has it: libfabric's verbs provider listens on
// "localhost" and its peers on the host connect to 127.0.0.1.
TEST_F(Cm_, LoopbackAddressesWithoutADeviceUseTheFirstDevice) {
  const IpAddr lo = *IpAddr::parse("127.0.0.1");
  Id* l = b.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(b.cm.bind(l, {lo, 7300}).ok());
  EXPECT_EQ(l->port(), &b.port);
  EXPECT_EQ(l->src().addr, lo);  // the id keeps the address it was given
  ASSERT_TRUE(b.cm.listen(l, 4).ok());
  Id* c = a.cm.create_id(nullptr, kPsTcp, QpType::rc);
  ASSERT_TRUE(a.cm.resolve_addr(c, std::nullopt, {lo, 7300}).ok());
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::addr_resolved}));
  EXPECT_EQ(c->port(), &a.port);
  EXPECT_EQ(c->dst().addr, lo);
  EXPECT_EQ(c->dgid(), *IpAddr::parse("10.0.0.1"));  // where its packets go
  ASSERT_TRUE(a.cm.resolve_route(c).ok());
  a.cm.set_qp(c, &qa);
  ASSERT_TRUE(a.cm.connect(c, {}).ok());
  // The REQ goes to the listening process (port 50000 at the device's address).
  ASSERT_FALSE(wire.queue.empty());
  EXPECT_EQ(wire.queue.front().dst, (Endpoint{*IpAddr::parse("10.0.0.1"), 50000}));
  deliver();
  Id* s = request_of_b();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(b.rec.last(ET::connect_request)->listen_id, l);
  EXPECT_EQ(s->dgid(), *IpAddr::parse("10.0.0.1"));
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  deliver();
  EXPECT_NE(a.rec.last(ET::established), nullptr);
  EXPECT_NE(b.rec.last(ET::established), nullptr);
  // An address of no device that is not loopback is still ENODEV.
  EXPECT_EQ(b.cm.bind(b.cm.create_id(nullptr, kPsTcp, QpType::rc), {*IpAddr::parse("10.9.9.9"), 1}).code(), ENODEV);
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
  EXPECT_FALSE(run_until([&, c = c] { return a.rec.of(c).size() > 1; }, ms(200)));  // nothing to wake it before
  ASSERT_TRUE(run_until([&, c = c] { return a.rec.of(c).size() > 1; }, ms(100)));
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
  ASSERT_TRUE(run_until([&, s = s] { return b.rec.of(s).size() > 2; }, ms(300)));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
}

TEST_F(Cm_, PeerProcessDyingInTheHandshakeGivesRejected) {
  listen_b();
  Id* c = resolved_a();
  Id* s = request_to_b(c);
  ASSERT_NE(s, nullptr);
  b.cm.set_qp(s, &qb);
  ASSERT_TRUE(b.cm.accept(s, {}).ok());
  wire.queue.clear();  // the REP is lost and a dies
  host.ports.erase({1, *IpAddr::parse("10.0.0.1")});
  nodes = {&b};
  ASSERT_TRUE(run_until([&, s = s] { return b.rec.of(s).size() > 1; }, ms(300)));
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
  EXPECT_FALSE(run_until([&, s = s] { return b.rec.of(s).size() > 2; }, ms(5000)));
  EXPECT_GE(wire.count(AttrId::class_port_info), 6u);  // probes and their answers
  EXPECT_EQ(a.rec.of(c), (std::vector<ET>{ET::established}));
  nodes = {&b};  // a's host goes silent
  ASSERT_TRUE(run_until([&, s = s] { return b.rec.of(s).size() > 2; }, ms(4500)));
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
  ASSERT_TRUE(run_until([&, s = s] { return b.rec.of(s).size() > 2; }, ms(3000), drop_dreq));
  EXPECT_EQ(b.rec.of(s), (std::vector<ET>{ET::connect_request, ET::established, ET::disconnected}));
}

}  // namespace
}  // namespace uroce::cm::test
