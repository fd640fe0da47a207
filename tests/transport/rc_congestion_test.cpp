// ECN and CNPs between two engines on a FakeNetwork (transport/congestion.hpp):
// what leaves ECN-capable, the CNP a CE mark earns (byte for byte), how
// often, what the sender does with it, and what it ignores.
#include <chrono>
#include <thread>

#include "fake_wire.hpp"
#include "wire/icrc.hpp"
#include "wire/opcode.hpp"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;
using transport::CcMode;
using transport::CongestionConfig;

CongestionConfig dcqcn(std::chrono::microseconds cnp_interval, uint64_t line_rate = 25000) {
  CongestionConfig c;
  c.mode = CcMode::dcqcn;
  c.dcqcn.cnp_interval = cnp_interval;
  c.dcqcn.line_rate = line_rate;
  return c;
}

PairOptions with(CongestionConfig c) {
  PairOptions o;
  o.congestion = c;
  return o;
}

bool from_requester(const net::FakePacket& fp, const Endpoint& a) {
  const WirePkt w = decode_pkt(fp);
  return w.ok && fp.src == a && (w.flags & wire::op::kRequest);
}

// The UDP payload of a CNP for `dest_qp`, with its ICRC over (src, dst).
std::vector<uint8_t> cnp_bytes(const Endpoint& src, const Endpoint& dst, uint32_t dest_qp) {
  std::vector<uint8_t> b = {
      0x81, 0x00, 0xff, 0xff, 0x40, uint8_t(dest_qp >> 16), uint8_t(dest_qp >> 8), uint8_t(dest_qp),
      0x00, 0x00, 0x00, 0x00};
  b.resize(12 + 16 + 4, 0);
  wire::IpUdpFields ip;
  ip.src = src.addr;
  ip.dst = dst.addr;
  ip.src_port = src.port;
  ip.dst_port = dst.port;
  wire::put_icrc(wire::compute_icrc(ip, b), &b[b.size() - 4]);
  return b;
}

void send_and_wait(Pair& p, uint32_t len, uint64_t id) {
  ASSERT_TRUE(post_recv(*p.b.qp, id, {p.b.sge(0, len)}).ok());
  Sge sge = p.a.sge(0, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, id, WcOpcode::send, len);
  expect_one(*p.b.rcq, id, WcOpcode::recv, len);
}

TEST(RcCongestion, DataLeavesEct0AndACeMarkEarnsOneCnpByteForByte) {
  Fake f(with(dcqcn(std::chrono::hours(1))));
  Pair& p = *f.p;
  f.net->set_recording(true);
  const Endpoint a = f.a_ep;
  f.net->set_filter([a](net::FakePacket& fp) {
    if (from_requester(fp, a)) fp.tos |= 3;  // a congested switch on the way to B
    return true;
  });
  send_and_wait(p, 4000, 1);  // 4 packets, each marked
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.ecn_marked, 4u);
  EXPECT_EQ(cb.cnp_sent, 1u);  // one per cnp_interval
  EXPECT_EQ(ca.rx_cnp, 1u);
  EXPECT_EQ(ca.cnp_handled, 1u);
  EXPECT_EQ(ca.cc_rate_mbps, 12500u);  // the line rate, halved (alpha 1)
  EXPECT_EQ(ca.ecn_marked, 0u);        // B's ACK and CNP were not marked

  int data = 0, cnps = 0;
  for (const net::FakePacket& fp : f.net->recorded()) {
    const WirePkt w = decode_pkt(fp);
    ASSERT_TRUE(w.ok);
    EXPECT_EQ(fp.tos, 0x02) << "opcode " << int(w.opcode());  // ECT(0), DSCP 0: data, ACK and CNP
    if (fp.src == a) ++data;
    if (w.opcode() != uint8_t(wire::Opcode::cnp)) continue;
    ++cnps;
    EXPECT_EQ(fp.src, f.b_ep);
    EXPECT_EQ(fp.dst, f.a_ep);
    EXPECT_EQ(fp.data, cnp_bytes(f.b_ep, f.a_ep, p.a.qp->qpn()));
  }
  EXPECT_EQ(data, 4);
  EXPECT_EQ(cnps, 1);
}

TEST(RcCongestion, WithNoIntervalEveryMarkedPacketEarnsACnp) {
  Fake f(with(dcqcn(0us)));
  Pair& p = *f.p;
  const Endpoint a = f.a_ep;
  f.net->set_filter([a](net::FakePacket& fp) {
    if (from_requester(fp, a)) fp.tos |= 3;
    return true;
  });
  send_and_wait(p, 4000, 1);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.ecn_marked, 4u);
  EXPECT_EQ(cb.cnp_sent, 4u);
  EXPECT_EQ(ca.cnp_handled, 4u);
  EXPECT_LE(ca.cc_rate_mbps, 25000u / 16);  // four cuts at alpha ~1
}

TEST(RcCongestion, ModeNoneSendsNotEctAndIgnoresCnps) {
  CongestionConfig none;
  none.mode = CcMode::none;
  Fake f(with(none));
  Pair& p = *f.p;
  f.net->set_recording(true);
  const Endpoint a = f.a_ep;
  f.net->set_filter([a](net::FakePacket& fp) {
    if (from_requester(fp, a)) fp.tos |= 3;  // marked anyway
    return true;
  });
  send_and_wait(p, 2000, 1);
  for (const net::FakePacket& fp : f.net->recorded()) EXPECT_EQ(fp.tos & 3, 0);
  ASSERT_TRUE(f.net->inject(f.a_ep, {f.b_ep, f.a_ep, 0, cnp_bytes(f.b_ep, f.a_ep, p.a.qp->qpn())}));
  send_and_wait(p, 2000, 2);  // the CNP is read while this runs
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.ecn_marked, 4u);  // counted...
  EXPECT_EQ(cb.cnp_sent, 0u);    // ...and not answered
  EXPECT_EQ(ca.rx_cnp, 1u);
  EXPECT_EQ(ca.cnp_handled, 0u);
  EXPECT_EQ(ca.cc_paced, 0u);
}

TEST(RcCongestion, CnpsFromStrangersOrForOtherQpsChangeNothing) {
  Fake f(with(dcqcn(50us)));
  Pair& p = *f.p;
  const Endpoint stranger{*IpAddr::parse("10.0.0.9"), 4791};
  const uint32_t qpn = p.a.qp->qpn();
  ASSERT_TRUE(f.net->inject(f.a_ep, {stranger, f.a_ep, 0, cnp_bytes(stranger, f.a_ep, qpn)}));
  ASSERT_TRUE(f.net->inject(f.a_ep, {f.b_ep, f.a_ep, 0, cnp_bytes(f.b_ep, f.a_ep, qpn ^ 0x100)}));
  std::vector<uint8_t> bad = cnp_bytes(f.b_ep, f.a_ep, qpn);
  bad[30] ^= 1;  // ICRC
  ASSERT_TRUE(f.net->inject(f.a_ep, {f.b_ep, f.a_ep, 0, bad}));
  send_and_wait(p, 100, 1);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.rx_cnp, 2u);
  EXPECT_EQ(ca.rx_icrc_bad, 1u);
  EXPECT_EQ(ca.cnp_handled, 0u);
  EXPECT_EQ(ca.cc_rate_mbps, 0u);
}

// A switch marks CE above 8 queued packets: a burst of 64 leaves 56 marked;
// B answers once (interval 1 h), A halves its rate (line 100 Mbit/s: 50) and
// paces what follows at it (no recovery within the test: the increase timer
// is an hour).
TEST(RcCongestion, SwitchMarkingAboveAThresholdPacesTheSender) {
  CongestionConfig c = dcqcn(std::chrono::hours(1), 100);
  c.dcqcn.increase_period = std::chrono::hours(1);
  c.dcqcn.increase_bytes = 1ull << 40;
  Fake f(with(c));
  Pair& p = *f.p;
  f.net->set_ecn_threshold(8);
  f.net->hold(f.b_ep, true);
  fill_pattern(p.a.buf.data(), 64 * 1024, 3);
  Sge sge = p.a.sge(0, 64 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  for (int i = 0; i < 500 && f.net->queued(f.b_ep) < 64; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(f.net->queued(f.b_ep), 64u);
  f.net->hold(f.b_ep, false);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_write, 64 * 1024);
  EXPECT_EQ(f.net->stats().ce_marked, 56u);
  EXPECT_EQ(p.b.counters().ecn_marked, 56u);
  EXPECT_EQ(p.b.counters().cnp_sent, 1u);
  Counters ca = p.a.counters();
  EXPECT_EQ(ca.cnp_handled, 1u);
  EXPECT_EQ(ca.cc_rate_mbps, 50u);

  // 256 KiB at 50 Mbit/s: at least 40 ms (a little credit aside).
  f.net->set_ecn_threshold(0);
  fill_pattern(p.a.buf.data(), 256 * 1024, 4);
  sge = p.a.sge(0, 256 * 1024);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, 2, WcOpcode::rdma_write, 256 * 1024, 10000);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 40ms);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 256 * 1024), -1);
  ca = p.a.counters();
  EXPECT_GT(ca.cc_paced, 0u);
  EXPECT_EQ(ca.cc_rate_mbps, 50u);
}

// A QP paced so slowly that a message takes longer than its retransmission
// interval (1 Mbit/s: 8 KiB in 70 ms; timeout 12: 16.8 ms): each message still
// leaves when its turn comes (an earlier timer does not swallow the pacing
// wake-up), every packet asks for its ACK (a quarter of the interval is less
// than one packet's time), and no retransmission timeout fires.
TEST(RcCongestion, APacedQpSlowerThanItsTimerKeepsSending) {
  CongestionConfig c = dcqcn(50us, 2);
  c.dcqcn.min_rate = 1;
  c.dcqcn.increase_period = std::chrono::hours(1);
  c.dcqcn.increase_bytes = 1ull << 40;
  PairOptions o = with(c);
  o.timeout = 12;
  Fake f(o);
  Pair& p = *f.p;
  ASSERT_TRUE(f.net->inject(f.a_ep, {f.b_ep, f.a_ep, 0, cnp_bytes(f.b_ep, f.a_ep, p.a.qp->qpn())}));
  send_and_wait(p, 100, 1);  // reads the CNP
  ASSERT_EQ(p.a.counters().cc_rate_mbps, 1u);
  f.net->set_recording(true);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t id = 2; id < 6; ++id) send_and_wait(p, 8192, id);
  // Paced: a 1 KiB packet is 1,096 bytes on the wire, 8,768 us at 1 Mbit/s,
  // so 31 gaps; less the credit (`burst`, 200 us) a send may find saved, and
  // slack for a loaded machine's clock reads (seen 1 ms short of 31 gaps
  // under load).  Unpaced, the 32 packets would leave within a millisecond.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 28 * 8768us);
  int data = 0;
  for (const net::FakePacket& fp : f.net->recorded()) {
    if (fp.src != f.a_ep) continue;
    const WirePkt w = decode_pkt(fp);
    ASSERT_TRUE(w.ok);
    ++data;
    EXPECT_TRUE(w.hdr.bth.ack_req) << "psn " << w.psn();
  }
  EXPECT_EQ(data, 32);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(ca.req_retransmits, 0u);
  EXPECT_GT(ca.cc_paced, 0u);
}

// CcMode::swift, the default: the window follows the round trip.  A target
// far above a loaded sanitizer build's scheduling noise (10 ms over the base
// RTT) and a retransmission timer longer than the tests' holds (268 ms).
PairOptions swift() {
  CongestionConfig c;
  c.mode = CcMode::swift;
  c.swift.target_delay = std::chrono::milliseconds(10);
  PairOptions o = with(c);
  o.timeout = 16;
  return o;
}

void write_and_wait(Pair& p, uint32_t len, uint64_t id) {
  fill_pattern(p.a.buf.data(), len, uint8_t(id));
  Sge sge = p.a.sge(0, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, id, WcOpcode::rdma_write, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
}

// ACKs held back 60 ms (a queue far above base RTT + 10 ms) cut the window
// once, by max_mdf: 256 -> 128 packets.
TEST(RcSwift, ARoundTripFarAboveTheTargetHalvesTheWindowOnce) {
  Fake f(swift());
  Pair& p = *f.p;
  for (uint64_t id = 1; id <= 4; ++id) write_and_wait(p, 4096, id);  // base RTT: a few round trips
  EXPECT_EQ(p.a.counters().cc_window, 256u);
  EXPECT_EQ(p.a.counters().cc_delay_cuts, 0u);
  f.net->hold(f.a_ep, true);  // what comes back to A waits
  fill_pattern(p.a.buf.data(), 64 * 1024, 9);
  Sge sge = p.a.sge(0, 64 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(9, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  std::this_thread::sleep_for(60ms);
  f.net->hold(f.a_ep, false);
  expect_one(*p.a.scq, 9, WcOpcode::rdma_write, 64 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 64 * 1024), -1);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.cc_delay_cuts, 1u);
  EXPECT_EQ(ca.cc_window, 128u);
  EXPECT_EQ(ca.req_window_cuts, 0u);
}

// A lost packet with no queue, to a peer that keeps what follows it, is
// random loss: one packet resent, the window untouched.  With go-back-N
// (UROCE_SR=0) the window is loss-based, never delay-based (cc_window
// stays unset), and the same loss halves it.
TEST(RcSwift, RandomLossLeavesTheWindowGoBackNHalvesIt) {
  for (const bool keeps : {true, false}) {
    PairOptions o = swift();
    o.congestion_b = o.congestion;
    o.congestion_b->selective_repeat = keeps;
    if (!keeps) o.congestion->selective_repeat = false;
    Fake f(o);
    Pair& p = *f.p;
    write_and_wait(p, 4096, 1);
    f.drop_nth(f.a_ep, wire::op::kRequest, 5);
    write_and_wait(p, 16 * 1024, 2);
    const Counters ca = p.a.counters();
    EXPECT_EQ(ca.req_seq_naks_rcvd, 1u) << keeps;
    EXPECT_EQ(ca.req_window_cuts, keeps ? 0u : 1u) << keeps;
    EXPECT_EQ(ca.cc_window, keeps ? 256u : 0u) << keeps;
  }
}

// A peer on this host (UDP over loopback) whose process gets no CPU for a
// while answers late, but no network queue stands behind that: the window,
// which the same late answer through a network cuts (above), stays, and the
// requester neither resends nor times out.
TEST(RcSwift, ALatePeerOnThisHostIsNoQueue) {
  Pair p(swift());  // UDP sockets, 127.0.0.1 <-> 127.0.0.2
  for (uint64_t id = 1; id <= 4; ++id) write_and_wait(p, 4096, id);
  fill_pattern(p.a.buf.data(), 64 * 1024, 9);
  Sge sge = p.a.sge(0, 64 * 1024);
  {
    // B's process gets no CPU: nothing of B's runs without its NIC's lock.
    std::lock_guard stalled(p.b.ctx->nic().mu());
    ASSERT_TRUE(post_send(*p.a.qp, make_wr(9, WrOpcode::rdma_write, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
    std::this_thread::sleep_for(40ms);
  }
  expect_one(*p.a.scq, 9, WcOpcode::rdma_write, 64 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 64 * 1024), -1);
  const Counters ca = p.a.counters();
  EXPECT_GE(ca.req_rtt_samples, 5u);
  EXPECT_EQ(ca.cc_delay_cuts, 0u);
  EXPECT_EQ(ca.req_window_cuts, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

}  // namespace
}  // namespace uroce::test
