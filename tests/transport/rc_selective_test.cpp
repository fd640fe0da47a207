// Selective repeat (transport/selective.cpp, reorder.hpp) on a FakeNetwork
// that loses chosen packets: a responder that keeps what follows a lost
// packet, a requester that resends only the lost one once it has seen that,
// and go-back-N, packet for packet, with a responder that keeps nothing.
#include <chrono>
#include <map>
#include <set>

#include "fake_wire.hpp"
#include "net/fault_io.hpp"

namespace uroce::test {
namespace {

namespace op = wire::op;

// Selective repeat on both sides; a resend goes again only after `wait`
// without its ACK (the default, 500 us, is shorter than a loaded test
// machine's scheduling delays: exact packet counts would depend on them).
PairOptions patient(std::chrono::milliseconds wait = std::chrono::hours(1), PairOptions o = {}) {
  transport::CongestionConfig c;
  c.resend_wait_min = wait;
  o.congestion = c;
  return o;
}

// The same, without SACKs (UROCE_SACK=0): holes are found one sequence
// NAK at a time, as before a peer has answered a hello.
PairOptions nak_only() {
  PairOptions o = patient();
  o.congestion->sack = false;
  return o;
}

// The PSNs of A's request packets, in the order they were sent.
std::vector<uint32_t> sent_psns(Fake& f) {
  std::vector<uint32_t> v;
  for (const WirePkt& w : decode_all(f.net->recorded()))
    if (w.ok && w.src == f.a_ep && (w.flags & op::kRequest)) v.push_back(w.psn() - f.p->opt.psn_a);
  return v;
}

// Drops A's request packets whose PSN (counted from the first) is in
// `lost`, each once for every time it is listed.
void lose(Fake& f, std::vector<uint32_t> lost) { f.lose_psns(f.a_ep, op::kRequest, std::move(lost)); }

// Posts a 10 KiB WRITE of A's buffer at `off` to the same place in B's.
void post_write_10k(Pair& p, uint64_t id, uint32_t off) {
  Sge sge = p.a.sge(off, 10 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::rdma_write, &sge, p.b.addr(off), p.b.mr->rkey())).ok());
}

TEST(RcSelectiveRepeat, OnlyTheLostPacketIsSentAgain) {
  Fake f(patient());
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

// A 10-packet WRITE times its last packet (the one that asks for an ACK,
// which completes no receive at the peer, so the ACK comes at once).  A hole
// before it, resent, holds the ACK that covers it back until the resend
// arrived: it is timed from that resend rather than not at all.  The timed
// packet lost itself gives no sample (Karn).
TEST(RcSelectiveRepeat, AHoleBeforeTheTimedPacketTimesItFromTheResend) {
  struct Case {
    std::vector<uint32_t> lost;
    uint64_t resent, samples, from_resends, timeouts;
  };
  // (The last packet lost draws no NAK: with the watch held off, the QP's
  // timeout sends all ten again, none of them timed.)
  for (const Case& c :
       {Case{{}, 0, 1, 0, 0}, Case{{3}, 1, 1, 1, 0}, Case{{2, 6}, 2, 1, 1, 0}, Case{{9}, 10, 0, 0, 1}}) {
    Fake f(patient());
    lose(f, c.lost);
    Pair& p = *f.p;
    fill_pattern(p.a.buf.data(), 10 * 1024, 7);
    post_write_10k(p, 1, 0);
    expect_one(*p.a.scq, 1, WcOpcode::rdma_write, 10 * 1024);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 10 * 1024), -1);
    const Counters ca = p.a.counters();
    const std::string what = std::to_string(c.lost.size()) + " lost";
    EXPECT_EQ(ca.req_retransmits, c.resent) << what;
    EXPECT_EQ(ca.req_rtt_samples, c.samples) << what;
    EXPECT_EQ(ca.req_rtt_from_resends, c.from_resends) << what;
    EXPECT_EQ(ca.req_timeouts, c.timeouts) << what;
  }
}

// The timed packet (the first WRITE's last) lost while a second WRITE
// follows: the second's packets draw a NAK for it and it alone goes again,
// so no sample (Karn: its ACK could be the first sending's); the second
// WRITE's packets, sent while the first was being timed, are not timed.
TEST(RcSelectiveRepeat, TheTimedPacketResentGivesNoSample) {
  Fake f(patient());
  lose(f, {9});
  Pair& p = *f.p;
  fill_pattern(p.a.buf.data(), 20 * 1024, 8);
  post_write_10k(p, 1, 0);
  post_write_10k(p, 2, 10 * 1024);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_write, 10 * 1024);
  expect_one(*p.a.scq, 2, WcOpcode::rdma_write, 10 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 20 * 1024), -1);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  EXPECT_EQ(ca.req_retransmits, 1u);
  EXPECT_EQ(ca.req_rtt_samples, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

// Holes found one after another: each is NAKed as soon as the one before it
// is filled; while the first recovery is still finding out whether the peer
// keeps packets, it follows them one PSN at a time.
TEST(RcSelectiveRepeat, SeveralHolesAreFilledOneAfterAnother) {
  Fake f(patient());
  f.net->set_recording(true);
  lose(f, {2, 4, 5});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(cb.resp_seq_naks_sent, 3u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
  EXPECT_EQ(ca.req_selective_resends, 3u);
  EXPECT_EQ(ca.req_retransmits, 3u);
  EXPECT_EQ(ca.req_sr_peers, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(sent_psns(f), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 4, 5}));
}

// Without GSO every packet leaves alone and is lost alone: a burst is
// resent packet by packet, each as its NAK names it (resending more than
// was named would be a guess, and behind a full queue a bad one).
TEST(RcSelectiveRepeat, WithoutTrainsABurstIsResentPacketByPacket) {
  Fake f(nak_only());
  f.net->set_recording(true);
  lose(f, {2, 3, 4, 5, 6, 7, 12, 13, 14, 15, 16, 17});
  send_10k(*f.p, 1);
  send_10k(*f.p, 2);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(ca.req_sr_peers, 1u);
  EXPECT_EQ(ca.req_sr_probes_failed, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(ca.req_seq_naks_rcvd, 12u);
  EXPECT_EQ(ca.req_selective_resends, 12u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
  const std::vector<uint32_t> want = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  2,  3,  4,  5,  6,  7,
                                      10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 12, 13, 14, 15, 16, 17};
  EXPECT_EQ(sent_psns(f), want);
}

// A Fake with GSO trains of up to 8 packets, whose B is known to keep what
// follows a loss (a first message lost a packet inside a train: PSNs 0..9).
struct TrainFake {
  std::unique_ptr<Fake> f;
  TrainFake() {
    // Loss-based window (never paced): trains as the batches form them;
    // the NAKs' rules (with SACKs every hole goes again as it is seen).
    PairOptions o = nak_only();
    o.congestion->mode = transport::CcMode::none;
    o.fake = net::FakeNetwork::create();
    o.fake->set_gso_max(8);
    f = std::make_unique<Fake>(o);
    f->net->set_recording(true);
    lose(*f, {3});
    send_10k(*f->p, 1);
  }
  // From now on drops first sendings of A's request packets that `pick`
  // names by (train, position in it): trains of first sendings (as the
  // requester counts them) from the first that starts at PSN `from` or
  // later, counted afresh every `stride` PSNs if not 0 (one per message).
  // Returns the PSNs dropped, by train (numbered on), as they go.
  using Dropped = std::map<int, std::vector<uint32_t>>;
  std::shared_ptr<Dropped> drop(uint32_t from, std::function<bool(int, uint32_t)> pick, uint32_t stride = 0) {
    struct State {
      int train = -1, in_msg = -1;
      uint32_t pos = 0;
      bool resends = false;  // the GSO train in the making began with a resend
      std::set<uint32_t> seen;
      Dropped dropped;
    };
    auto st = std::make_shared<State>();
    auto out = std::shared_ptr<Dropped>(st, &st->dropped);
    const uint32_t base = f->p->opt.psn_a;
    const Endpoint a = f->a_ep;
    f->drop_if([=](const WirePkt& w) {
      const uint32_t psn = w.psn() - base;
      if (w.src != a || !(w.flags & op::kRequest)) return false;
      if (!st->seen.insert(psn).second) {
        if (!w.joined) st->resends = true;
        return false;
      }
      if (!w.joined || st->resends) {
        st->resends = false;
        if (st->train < 0 && psn < from) return false;
        ++st->train;
        st->in_msg = stride != 0 && (psn - from) % stride == 0 ? 0 : st->in_msg + 1;
        st->pos = 0;
      } else {
        ++st->pos;
      }
      if (st->train < 0 || !pick(stride ? st->in_msg : st->train, st->pos)) return false;
      st->dropped[st->train].push_back(psn);
      return true;
    });
    return out;
  }
  static std::vector<uint32_t> all(const Dropped& d) {
    std::vector<uint32_t> v;
    for (const auto& [train, psns] : d) v.insert(v.end(), psns.begin(), psns.end());
    return v;
  }
  // A WRITE of `kib` KiB from A to B, checked byte for byte.
  void write(uint64_t id, uint32_t kib) {
    Pair& p = *f->p;
    fill_pattern(p.a.buf.data(), kib * 1024, uint8_t(id));
    Sge sge = p.a.sge(0, kib * 1024);
    ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
    expect_one(*p.a.scq, id, WcOpcode::rdma_write, kib * 1024);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), kib * 1024), -1);
  }
  // The PSNs A sent again (each time after the first), from the `skip`th
  // resend on.
  std::vector<uint32_t> resent(size_t skip = 0) {
    std::set<uint32_t> seen;
    std::vector<uint32_t> v;
    for (uint32_t psn : sent_psns(*f))
      if (!seen.insert(psn).second) v.push_back(psn);
    return std::vector<uint32_t>(v.begin() + std::min(skip, v.size()), v.end());
  }
};

// With GSO a drop takes a whole train: one datagram meets a full queue, a
// socket buffer, a firewall.  A NAK for a packet that left first in its
// train resends the rest of the train at once; one for a packet that left
// inside a train (those before it arrived) resends it alone.  Either way
// exactly what was lost goes again.
TEST(RcSelectiveRepeat, ATrainLostWholeGoesAgainWholeAPartOfOnePacketByPacket) {
  for (const bool whole : {true, false}) {
    TrainFake t;
    // Of a 32 KiB WRITE (PSNs 10..41), the second train from PSN 14 on: all
    // of it, or its packets after the second.
    auto trains = t.drop(14, [whole](int train, uint32_t pos) { return train == 1 && (whole || pos >= 2); });
    t.write(2, 32);
    const std::vector<uint32_t> dropped = TrainFake::all(*trains);
    ASSERT_GE(dropped.size(), whole ? 2u : 1u) << whole;  // trains formed
    const Counters ca = t.f->p->a.counters(), cb = t.f->p->b.counters();
    EXPECT_EQ(ca.req_timeouts, 0u) << whole;
    EXPECT_EQ(cb.resp_duplicates, 0u) << whole;
    EXPECT_EQ(ca.req_selective_resends, 1 + dropped.size()) << whole;
    // (A NAK B sent before a packet of the same resend run arrived is not
    // answered: req_sr_stale_naks.)
    EXPECT_EQ(ca.req_seq_naks_rcvd - ca.req_sr_stale_naks, 1 + (whole ? 1 : dropped.size())) << whole;
    EXPECT_EQ(t.resent(1), dropped) << whole;
  }
}

// Where trains are cut into packets before the loss (a NIC, a tbf with a
// small burst), a full queue drops parts of trains, and resending the rest
// of a train resends what arrived.  Two NAKs for packets inside trains turn
// that off: a train lost whole then goes again packet by packet, one NAK
// each, until eight NAKs have named trains' first packets.
TEST(RcSelectiveRepeat, PartsOfTrainsLostTurnRunsOffWholeTrainsOnAgain) {
  TrainFake t;
  // A 64 KiB WRITE (PSNs 10..73): the third packet of the second and third
  // trains from PSN 10 on, then the whole fifth train.
  auto first =
      t.drop(10, [](int train, uint32_t pos) { return ((train == 1 || train == 2) && pos == 2) || train == 4; });
  t.write(2, 64);
  const std::vector<uint32_t> dropped = TrainFake::all(*first);
  ASSERT_EQ(first->size(), 3u);
  ASSERT_GE(first->at(4).size(), 2u);
  Counters ca = t.f->p->a.counters();
  EXPECT_EQ(ca.req_sr_trains_split, 1u);
  EXPECT_EQ(ca.req_seq_naks_rcvd - ca.req_sr_stale_naks, 1 + dropped.size());  // a NAK of its own for each
  EXPECT_EQ(t.resent(1), dropped);
  // A whole train lost in each of nine 32 KiB WRITEs: the first six go
  // again packet by packet; the seventh is the eighth train whose first
  // packet a NAK named since runs went off (the fifth train above was the
  // first): runs are on again, and the last three go again after one NAK.
  const size_t resends = t.resent().size();
  const uint64_t naks = ca.req_seq_naks_rcvd - ca.req_sr_stale_naks;
  auto lost = t.drop(
      74, [](int train, uint32_t) { return train == 1; }, 32);  // each WRITE's second
  for (uint64_t id = 3; id <= 11; ++id) t.write(id, 32);
  ca = t.f->p->a.counters();
  ASSERT_EQ(lost->size(), 9u);
  size_t first_six = 0, n = 0;  // packets of the first six trains lost
  for (const auto& [train, psns] : *lost) {
    ASSERT_GE(psns.size(), 2u) << train;
    if (n++ < 6) first_six += psns.size();
  }
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(t.f->p->b.counters().resp_duplicates, 0u);
  EXPECT_EQ(t.resent(resends), TrainFake::all(*lost));
  EXPECT_EQ(ca.req_seq_naks_rcvd - ca.req_sr_stale_naks - naks, first_six + 3);
  EXPECT_EQ(ca.req_sr_trains_split, 1u);
}

// The last packets of a message lost, with nothing after them to draw a
// NAK: the watch resends una; once that is acknowledged and the packet
// after it still missing with no NAK, nothing after it arrived, and the
// rest of the tail goes again at once.
TEST(RcSelectiveRepeat, ATailLostWholeGoesAgainAfterTheWatchTwice) {
  PairOptions o = patient(std::chrono::milliseconds(5));
  o.timeout = 16;  // 268 ms: far beyond two watches
  Fake f(o);
  f.net->set_recording(true);
  lose(f, {3, 16, 17, 18, 19});
  send_10k(*f.p, 1);
  send_10k(*f.p, 2);
  const Counters ca = f.p->a.counters();
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  std::vector<uint32_t> psns = sent_psns(f);
  ASSERT_GE(psns.size(), 21u);
  std::vector<uint32_t> again(psns.begin() + 21, psns.end());
  // B acknowledges 10..15 lazily (the SEND consumes a receive): when that
  // ACK comes after the first watch, 10 went again first to draw it.
  if (!again.empty() && again.front() == 10) again.erase(again.begin());
  EXPECT_EQ(again, (std::vector<uint32_t>{16, 17, 18, 19}));
  EXPECT_EQ(ca.req_selective_resends, 1 + psns.size() - 21);
  // 16 alone, then 17..19 as one run: the last packet of each asks for an ACK.
  std::vector<bool> asks;
  size_t i = 0;
  for (const WirePkt& w : decode_all(f.net->recorded()))
    if (w.src == f.a_ep && (w.flags & op::kRequest) && i++ >= psns.size() - 4) asks.push_back(w.hdr.bth.ack_req);
  EXPECT_EQ(asks, (std::vector<bool>{true, false, false, true}));
}

// A READ request lost (then its first resend too), to a peer known to keep:
// the watch asks again after about two round trips, long before the QP's
// retransmission timeout, and without using up a retry.
TEST(RcSelectiveRepeat, ALostReadRequestIsAskedAgainByTheWatch) {
  PairOptions o = patient(std::chrono::milliseconds(5));
  o.timeout = 16;  // 268 ms: far beyond the watches
  Fake f(o);
  f.net->set_recording(true);
  lose(f, {3, 10, 10});  // 10: the READ's request
  send_10k(*f.p, 1);
  Pair& p = *f.p;
  fill_pattern(p.b.buf.data() + 8192, 4096, 5);
  Sge sge = p.a.sge(8192, 4096);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::rdma_read, &sge, p.b.addr(8192), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, 2, WcOpcode::rdma_read, 4096);
  EXPECT_EQ(first_diff(p.a.buf.data() + 8192, p.b.buf.data() + 8192, 4096), -1);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(ca.req_sr_rd_atomic_resends, 2u);
  EXPECT_EQ(sent_psns(f), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 10, 10, 10}));
}

// The resend is lost too: the requester sends it again after about two
// round trips (here at least 5 ms), long before the QP's retransmission
// timeout (67 ms).
TEST(RcSelectiveRepeat, ALostResendGoesAgainWithoutATimeout) {
  Fake f(patient(std::chrono::milliseconds(5)));
  f.net->set_recording(true);
  lose(f, {6, 6});
  send_10k(*f.p, 1);
  const Counters ca = f.p->a.counters();
  EXPECT_GE(ca.req_selective_resends, 2u);
  EXPECT_EQ(ca.req_retransmits, ca.req_selective_resends);
  EXPECT_EQ(ca.req_timeouts, 0u);
  const std::vector<uint32_t> psns = sent_psns(f);
  const std::vector<uint32_t> want = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 6, 6};
  ASSERT_GE(psns.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), psns.begin()));
}

// Packets that arrive in reverse order are all kept: the NAK the first one
// drew is superseded by the ACK of them all before it leaves.
TEST(RcSelectiveRepeat, ReorderedPacketsNeedNoResend) {
  Fake f(patient());
  Pair& p = *f.p;
  ASSERT_NO_FATAL_FAILURE(send_reversed(f));
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
// same order.  After eight such recoveries it no longer tries.
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
  PairOptions o = go_back_n(true);
  o.congestion->resend_wait_min = std::chrono::hours(1);
  Fake f(o);
  f.net->set_recording(true);
  lose(f, {3, 13, 23, 33, 43, 53, 63, 73, 83});  // one loss in each of nine messages
  send_10k(*f.p, 1);
  EXPECT_EQ(sent_psns(f), want);
  for (uint64_t id = 2; id <= 9; ++id) send_10k(*f.p, id);
  const Counters ca = f.p->a.counters(), cb = f.p->b.counters();
  EXPECT_EQ(ca.req_sr_probes_failed, 8u);
  EXPECT_EQ(ca.req_sr_peers, 0u);
  EXPECT_EQ(ca.req_selective_resends, 8u);  // the ninth loss: plain go-back-N
  EXPECT_EQ(ca.req_retransmits, 9 * 7u);
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

namespace uroce::test {
namespace {

// Random loss (1% of packets, each way, a fixed seed) under a stream of
// 1 MiB WRITEs: the peer is recognised as keeping at the first recovery,
// every loss is answered by its packet alone, no timeout fires, and every
// byte lands.  The watch waits 50 ms (the QP's timeout 537 ms): an ACK
// held up by the scheduler (TSan, a loaded CI machine) for longer than a
// short wait would draw a resend of a packet that was not lost.
TEST(RcSelectiveRepeat, RandomLossIsRecoveredPacketByPacket) {
  PairOptions o = patient(std::chrono::milliseconds(50));
  o.timeout = 17;
  o.mtu = Mtu::m4096;
  o.buf_size = 4 << 20;
  o.wrap = random_drops(0.01);
  Fake f(o);
  Pair& p = *f.p;
  fill_pattern(p.a.buf.data(), 4 << 20, 9);
  for (uint64_t i = 0; i < 16; ++i) {
    Sge sge = p.a.sge((i % 4) << 20, 1 << 20);
    SendWr wr = make_wr(i, WrOpcode::rdma_write, &sge, p.b.addr((i % 4) << 20), p.b.mr->rkey());
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  }
  for (uint64_t i = 0; i < 16; ++i) expect_one(*p.a.scq, i, WcOpcode::rdma_write, 1 << 20, 20000);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 4 << 20), -1);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  // Each packet lost was resent alone, about once (a lost NAK or ACK, or
  // one slower than 50 ms, costs a resend of una).
  EXPECT_GE(ca.req_retransmits, ca.fault_tx_dropped);
  EXPECT_LE(ca.req_retransmits, ca.fault_tx_dropped + cb.fault_tx_dropped + 4);
  EXPECT_EQ(ca.req_selective_resends, ca.req_retransmits);
  EXPECT_EQ(cb.resp_ooo_kept, cb.resp_ooo_executed);
  EXPECT_EQ(ca.req_sr_peers, 1u);
  EXPECT_EQ(ca.req_sr_probes_failed, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

}  // namespace
}  // namespace uroce::test
