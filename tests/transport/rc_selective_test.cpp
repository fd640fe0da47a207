// Selective repeat (transport/selective.cpp, reorder.hpp) on a FakeNetwork
// that loses chosen packets: a responder that keeps what follows a lost
// packet, a requester that resends only the lost one once it has seen that,
// and go-back-N, packet for packet, with a responder that keeps nothing.
#include "fake_wire.hpp"

namespace uroce::test {
namespace {

namespace op = wire::op;

// The PSNs of A's request packets, in the order they were sent.
std::vector<uint32_t> sent_psns(Fake& f) {
  std::vector<uint32_t> v;
  for (const WirePkt& w : decode_all(f.net->recorded()))
    if (w.ok && w.src == f.a_ep && (w.flags & op::kRequest)) v.push_back(w.psn() - f.p->opt.psn_a);
  return v;
}

// Drops A's request packets whose PSN (counted from the first) is in
// `lost`, each once for every time it is listed.
void lose(Fake& f, std::vector<uint32_t> lost) {
  const uint32_t base = f.p->opt.psn_a;
  const Endpoint a = f.a_ep;
  auto left = std::make_shared<std::vector<uint32_t>>(std::move(lost));
  f.drop_if([=](const WirePkt& w) {
    if (w.src != a || !(w.flags & op::kRequest)) return false;
    auto it = std::find(left->begin(), left->end(), w.psn() - base);
    if (it == left->end()) return false;
    left->erase(it);
    return true;
  });
}

void send_10k(Pair& p, uint64_t id) {
  fill_pattern(p.a.buf.data(), 10 * 1024, uint32_t(id));
  ASSERT_TRUE(post_recv(*p.b.qp, id, {p.b.sge(0, 16384)}).ok());
  Sge sge = p.a.sge(0, 10 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, id, WcOpcode::send, 10 * 1024);
  expect_one(*p.b.rcq, id, WcOpcode::recv, 10 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 10 * 1024), -1);
}

TEST(RcSelectiveRepeat, OnlyTheLostPacketIsSentAgain) {
  Fake f;
  f.net->set_recording(true);
  lose(f, {3});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(cb.resp_future_psn, 6u);
  EXPECT_EQ(cb.resp_ooo_kept, 6u);
  EXPECT_EQ(cb.resp_ooo_executed, 6u);
  EXPECT_EQ(cb.resp_seq_naks_sent, 1u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  EXPECT_EQ(ca.req_selective_resends, 1u);
  EXPECT_EQ(ca.req_retransmits, 1u);
  EXPECT_EQ(ca.req_packets, 11u);
  EXPECT_EQ(ca.req_sr_peers, 1u);  // the resend showed B keeps packets
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(sent_psns(f), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3}));
  // The resend asks for an ACK: B's answer comes at once.
  const auto rec = decode_all(f.net->recorded());
  int resends = 0;
  for (size_t i = 0; i < rec.size(); ++i) {
    if (rec[i].src == f.a_ep && rec[i].psn() == f.p->opt.psn_a + 3 && ++resends == 2) {
      EXPECT_TRUE(rec[i].hdr.bth.ack_req);
    }
  }
  EXPECT_EQ(resends, 2);
}

// Holes found one after another: each is NAKed as soon as the one before it
// is filled, and resent alone.
TEST(RcSelectiveRepeat, SeveralHolesAreFilledOneByOne) {
  Fake f;
  f.net->set_recording(true);
  lose(f, {2, 4, 5});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(cb.resp_seq_naks_sent, 3u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
  EXPECT_EQ(ca.req_selective_resends, 3u);
  EXPECT_EQ(ca.req_retransmits, 3u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(sent_psns(f), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 4, 5}));
}

// The resend is lost too: the requester sends it again after about two
// round trips, long before the QP's retransmission timeout (67 ms).
TEST(RcSelectiveRepeat, ALostResendGoesAgainWithoutATimeout) {
  Fake f;
  f.net->set_recording(true);
  lose(f, {6, 6});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters();
  EXPECT_EQ(ca.req_selective_resends, 2u);
  EXPECT_EQ(ca.req_retransmits, 2u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(sent_psns(f), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 6, 6}));
}

// Packets that arrive in reverse order are all kept: the NAK the first one
// drew is superseded by the ACK of them all before it leaves.
TEST(RcSelectiveRepeat, ReorderedPacketsNeedNoResend) {
  Fake f;
  Pair& p = *f.p;
  fill_pattern(p.a.buf.data(), 6 * 1024, 8);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 8192)}).ok());
  ASSERT_TRUE(f.net->hold(f.b_ep, true));
  Sge sge = p.a.sge(0, 6 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  ASSERT_TRUE(wait_until([&] { return f.net->queued(f.b_ep) == 6; }));
  ASSERT_TRUE(f.net->reverse(f.b_ep));
  ASSERT_TRUE(f.net->hold(f.b_ep, false));
  expect_one(*p.a.scq, 1, WcOpcode::send, 6 * 1024);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 6 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 6 * 1024), -1);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.resp_future_psn, 5u);
  EXPECT_EQ(cb.resp_ooo_kept, 5u);
  EXPECT_EQ(cb.resp_ooo_executed, 5u);
  EXPECT_EQ(cb.resp_seq_naks_sent, 0u);
  EXPECT_EQ(ca.req_seq_naks_rcvd, 0u);
  EXPECT_EQ(ca.req_retransmits, 0u);
}

// A responder that keeps nothing (rdma_rxe, a NIC): the requester's resend of
// the lost packet alone is answered by an ACK of that packet only, and it
// goes back N from the next one -- the very packets go-back-N sends, in the
// same order.  After three such recoveries it no longer tries.
TEST(RcSelectiveRepeat, AGoBackNResponderSeesGoBackNPacketForPacket) {
  std::vector<uint32_t> want;
  {
    Fake g(go_back_n(false));
    g.net->set_recording(true);
    lose(g, {3});
    send_10k(*g.p, 1);
    want = sent_psns(g);
    EXPECT_EQ(want, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6, 7, 8, 9}));
  }
  Fake f(go_back_n(true));
  f.net->set_recording(true);
  lose(f, {3, 13, 23, 33});  // one loss in each of four messages
  send_10k(*f.p, 1);
  EXPECT_EQ(sent_psns(f), want);
  for (uint64_t id = 2; id <= 4; ++id) send_10k(*f.p, id);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(ca.req_sr_probes_failed, 3u);
  EXPECT_EQ(ca.req_sr_peers, 0u);
  EXPECT_EQ(ca.req_selective_resends, 3u);  // the fourth loss: plain go-back-N
  EXPECT_EQ(ca.req_retransmits, 4 * 7u);
  EXPECT_EQ(cb.resp_ooo_kept, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

// A go-back-N requester (selective repeat off) and a responder that keeps:
// the kept packets come again and are answered as duplicates.
TEST(RcSelectiveRepeat, AGoBackNRequesterIsServedByAKeepingResponder) {
  PairOptions o;
  transport::CongestionConfig off, on;
  off.selective_repeat = false;
  o.congestion = off;
  o.congestion_b = on;
  Fake f(o);
  lose(f, {3});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(ca.req_retransmits, 7u);
  EXPECT_EQ(cb.resp_ooo_kept, 6u);
  EXPECT_EQ(cb.resp_duplicates, 6u);
}

}  // namespace
}  // namespace uroce::test
