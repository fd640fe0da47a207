// SACKs between uroce peers (transport/sack.cpp, wire/sack.hpp) on a
// FakeNetwork that loses chosen packets: once the requester has seen its
// peer keep packets it asks for SACKs, and every hole below a PSN the peer
// holds goes again at once, instead of one sequence NAK (one round trip)
// per hole; towards a peer that keeps nothing, or does not send SACKs,
// nothing changes on the wire.
#include <chrono>

#include "fake_wire.hpp"
#include "transport/requester.hpp"  // kSackHellos

namespace uroce::test {
namespace {

namespace op = wire::op;

// A loss-based window (a slow round trip under a sanitizer does not shrink
// it), and no resend but for a NAK or a SACK for a second (the QP's
// timeout).
PairOptions patient(bool sack = true) {
  transport::CongestionConfig c;
  c.mode = transport::CcMode::none;
  c.resend_wait_min = std::chrono::hours(1);
  c.sack = sack;
  PairOptions o;
  o.congestion = c;
  o.timeout = 18;
  return o;
}

void lose(Fake& f, std::vector<uint32_t> lost) { f.lose_psns(f.a_ep, op::kRequest, std::move(lost)); }

// What crossed the wire, in order: A's requests by PSN (from A's first),
// A's hellos as "H", B's SACKs as "S", B's ACKs and NAKs as "A<psn>".
std::vector<std::string> trace(Fake& f) {
  std::vector<std::string> v;
  const uint32_t base = f.p->opt.psn_a;
  for (const WirePkt& w : decode_all(f.net->recorded())) {
    if (!w.ok) continue;
    const uint32_t psn = (w.psn() - base) & 0xffffff;
    if (w.opcode() == uint8_t(wire::Opcode::uroce_sack_hello))
      v.push_back("H");
    else if (w.opcode() == uint8_t(wire::Opcode::uroce_sack))
      v.push_back("S" + std::to_string(psn));
    else if (w.src == f.a_ep && (w.flags & op::kRequest))
      v.push_back(std::to_string(psn));
    else if (w.src == f.b_ep && (w.flags & op::kAck))
      v.push_back("A" + std::to_string(psn));
  }
  return v;
}

// Where `what` first appears in `t` (t.size() if nowhere).
size_t at(const std::vector<std::string>& t, const std::string& what, size_t from = 0) {
  for (size_t i = from; i < t.size(); ++i)
    if (t[i] == what) return i;
  return t.size();
}

// The first message shows B keeps (3 is lost and resent alone); A asks for
// SACKs.  In the second, three holes: with SACKs all three go again before
// B has acknowledged the first, each once; without, each waits for the
// sequence NAK B sends when the one before it is filled.
TEST(RcSack, EveryHoleBelowAPsnHeldGoesAgainAtOnce) {
  for (const bool sack : {true, false}) {
    Fake f(patient(sack));
    f.net->set_recording(true);
    lose(f, {3, 12, 14, 16});
    send_10k(*f.p, 1);
    send_10k(*f.p, 2);
    const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
    const std::vector<std::string> t = trace(f);
    std::string all;
    for (const std::string& s : t) all += s + " ";
    SCOPED_TRACE(all);
    EXPECT_EQ(ca.req_timeouts, 0u);
    EXPECT_EQ(cb.resp_duplicates, 0u);
    EXPECT_EQ(ca.req_retransmits, 4u);  // each lost packet once
    EXPECT_EQ(ca.req_sr_peers, 1u);
    EXPECT_EQ(ca.req_sack_hellos, sack ? 1u : 0u);
    EXPECT_EQ(cb.resp_sack_peers, sack ? 1u : 0u);
    EXPECT_EQ(ca.req_sacks_rcvd, cb.resp_sacks_sent);
    // The hello leaves after the probe settled, before the second message.
    EXPECT_EQ(at(t, "H") < at(t, "10"), sack);
    const size_t resent16 = at(t, "16", at(t, "19"));
    ASSERT_LT(resent16, t.size());
    // B's acknowledgement of 12's resend (an ACK or NAK naming 13 or later).
    size_t acked12 = t.size();
    for (size_t i = at(t, "12", at(t, "19")); i < t.size(); ++i)
      if (t[i][0] == 'A' && std::stoul(t[i].substr(1)) >= 13) {
        acked12 = i;
        break;
      }
    if (sack) {
      EXPECT_GE(cb.resp_sacks_sent, 1u);
      EXPECT_EQ(ca.req_sack_resends, 2u);  // 14 and 16; 12 went again for its NAK
      EXPECT_LT(resent16, acked12) << "all holes resent in one round trip";
      EXPECT_EQ(cb.resp_seq_naks_sent, 2u);  // one per message: the first hole
    } else {
      EXPECT_EQ(cb.resp_sacks_sent, 0u);
      EXPECT_EQ(ca.req_sack_resends, 0u);
      EXPECT_GT(resent16, acked12) << "one hole per round trip";
      EXPECT_EQ(cb.resp_seq_naks_sent, 4u);
    }
  }
}

// A responder that keeps nothing (rdma_rxe, a NIC) is never shown to keep:
// no hello goes to it, however many recoveries.  One that keeps but sends
// no SACKs (UROCE_SACK=0 there) gets hellos and answers none: recovery goes
// on by NAKs, exact.
TEST(RcSack, NoSackPacketsWithAPeerThatDoesNotSendThem) {
  {
    Fake f(go_back_n(true));
    f.net->set_recording(true);
    lose(f, {3, 13, 23});
    for (uint64_t id = 1; id <= 3; ++id) send_10k(*f.p, id);
    for (const std::string& s : trace(f)) EXPECT_TRUE(s != "H" && s[0] != 'S') << s;
    EXPECT_EQ(f.p->a.counters().req_sack_hellos, 0u);
  }
  PairOptions o = patient();
  transport::CongestionConfig b = *o.congestion;
  b.sack = false;
  o.congestion_b = b;
  Fake f(o);
  f.net->set_recording(true);
  // A loss in each of twelve messages: a hello after the first showed B
  // keeps, one with each NAK after it, eight in all.
  std::vector<uint32_t> lost;
  for (uint32_t m = 0; m < 12; ++m) lost.push_back(m * 10 + 3);
  lose(f, lost);
  for (uint64_t id = 1; id <= 12; ++id) send_10k(*f.p, id);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(ca.req_sack_hellos, uint64_t(transport::kSackHellos));
  EXPECT_EQ(cb.resp_sack_peers, 0u);
  EXPECT_EQ(cb.resp_sacks_sent, 0u);
  EXPECT_EQ(ca.req_retransmits, 12u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

}  // namespace
}  // namespace uroce::test
