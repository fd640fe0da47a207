// RC reliability on a FakeNetwork that loses chosen packets
// deterministically: go-back-N after a PSN sequence NAK, timeouts for lost
// ACKs, re-requested READ tails, the atomic replay cache.  The NIC counters
// must show exactly what happened, and the data must be exact.  One case
// checks the packets on the wire themselves.
#include "fake_wire.hpp"
#include "wire/icrc.hpp"

namespace uroce::test {
namespace {

namespace op = wire::op;

TEST(RcLoss, ThreePacketSendOnTheWire) {
  Fake f;
  Pair& p = *f.p;
  f.net->set_recording(true);
  fill_pattern(p.a.buf.data(), 2999, 1);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 4096)}).ok());
  Sge sge = p.a.sge(0, 2999);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, 1, WcOpcode::send, 2999);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 2999);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 2999), -1);

  auto raw = f.net->recorded();
  auto rec = decode_all(raw);
  ASSERT_EQ(rec.size(), 4u);
  const uint8_t want_op[3] = {uint8_t(wire::Opcode::rc_send_first), uint8_t(wire::Opcode::rc_send_middle),
                              uint8_t(wire::Opcode::rc_send_last)};
  const size_t want_len[3] = {1024, 1024, 951};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(rec[i].ok);
    EXPECT_EQ(rec[i].src, f.a_ep);
    EXPECT_EQ(rec[i].dst, f.b_ep);
    EXPECT_EQ(rec[i].opcode(), want_op[i]);
    EXPECT_EQ(rec[i].psn(), p.opt.psn_a + i);
    EXPECT_EQ(rec[i].hdr.bth.ack_req, i == 2);
    EXPECT_EQ(rec[i].hdr.bth.dest_qp, p.b.qp->qpn());
    EXPECT_EQ(rec[i].hdr.bth.pkey, 0xffff);
    EXPECT_FALSE(rec[i].hdr.bth.solicited);
    EXPECT_EQ(rec[i].hdr.bth.pad, i == 2 ? 1 : 0);
    EXPECT_EQ(rec[i].payload, want_len[i]);
  }
  const WirePkt& ack = rec[3];
  ASSERT_TRUE(ack.ok);
  EXPECT_EQ(ack.src, f.b_ep);
  EXPECT_EQ(ack.dst, f.a_ep);
  EXPECT_EQ(ack.opcode(), uint8_t(wire::Opcode::rc_ack));
  EXPECT_EQ(ack.psn(), p.opt.psn_a + 2);
  EXPECT_EQ(ack.hdr.bth.dest_qp, p.a.qp->qpn());
  EXPECT_EQ(wire::aeth_type(ack.hdr.aeth.syndrome), wire::AckType::ack);
  EXPECT_EQ(ack.hdr.aeth.msn, 1u);
  // Every packet carries a valid ICRC over its (IPv4, DF, ID 0) headers.
  for (const auto& fp : raw) {
    wire::IpUdpFields ip;
    ip.src = fp.src.addr;
    ip.dst = fp.dst.addr;
    ip.src_port = fp.src.port;
    ip.dst_port = fp.dst.port;
    EXPECT_EQ(wire::verify_icrc(ip, fp.data), wire::IcrcCheck::ok);
  }
}

TEST(RcLoss, DroppedDataPacketGoesBackN) {
  Fake f(go_back_n());
  Pair& p = *f.p;
  f.drop_nth(f.a_ep, op::kSend, 4);  // the 4th of 10 SEND packets
  fill_pattern(p.a.buf.data(), 10 * 1024, 2);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 16384)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 8, {p.b.sge(0, 16384)}).ok());
  Sge sge = p.a.sge(0, 10 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, 1, WcOpcode::send, 10 * 1024);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 10 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 10 * 1024), -1);
  EXPECT_TRUE(drain(*p.b.rcq, 5).empty());
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.resp_future_psn, 6u);     // packets 5..10 of the first pass
  EXPECT_EQ(cb.resp_seq_naks_sent, 1u);  // one NAK per gap
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  EXPECT_EQ(ca.req_retransmits, 7u);  // 4..10 again
  EXPECT_EQ(ca.req_packets, 17u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_duplicates, 0u);
}

TEST(RcLoss, DroppedAckIsRecoveredByTimeout) {
  PairOptions o;
  o.timeout = 14;  // 67 ms: one timeout, and the resend's ACK surely within the next
  Fake f(o);
  Pair& p = *f.p;
  f.drop_nth(f.b_ep, op::kAck, 1);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 100)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 8, {p.b.sge(0, 100)}).ok());
  fill_pattern(p.a.buf.data(), 100, 3);
  Sge sge = p.a.sge(0, 100);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, 1, WcOpcode::send, 100);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 100);
  EXPECT_TRUE(drain(*p.b.rcq, 5).empty()) << "the duplicate consumed a receive";
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_timeouts, 1u);
  EXPECT_EQ(ca.req_retransmits, 1u);
  EXPECT_EQ(cb.resp_duplicates, 1u);
  EXPECT_EQ(cb.resp_acks_sent, 2u);
  EXPECT_EQ(ca.req_acks_rcvd, 1u);
}

// The receiver destroys its QP right after its last receive completes (a
// program that exits), and its ACK is lost: without an answer the sender
// would resend to a QP that is gone until its retries ran out.  The QP going
// away repeats its final ACK twice: the sender completes without a resend.
TEST(RcLoss, AQpGoingAwayRepeatsItsFinalAck) {
  PairOptions o;
  o.timeout = 14;  // 67 ms: a resend would show
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_recording(true);
  f.drop_nth(f.b_ep, op::kAck, 1);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 100)}).ok());
  fill_pattern(p.a.buf.data(), 100, 3);
  Sge sge = p.a.sge(0, 100);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 100);
  const uint32_t b_qpn = p.b.qp->qpn();
  p.b.qp.reset();
  expect_one(*p.a.scq, 1, WcOpcode::send, 100);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_retransmits, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_final_acks_repeated, 2u);
  // On the wire: B's ACKs for A's one packet, the first dropped, all alike.
  int acks = 0;
  for (const WirePkt& w : decode_all(f.net->recorded())) {
    if (!w.ok || w.src != f.b_ep || w.opcode() != uint8_t(wire::Opcode::rc_ack)) continue;
    ++acks;
    EXPECT_EQ(w.psn(), p.opt.psn_a);
    EXPECT_EQ(w.hdr.bth.dest_qp, p.a.qp->qpn());
    EXPECT_EQ(wire::aeth_type(w.hdr.aeth.syndrome), wire::AckType::ack);
    EXPECT_EQ(w.hdr.aeth.msn, 1u);
  }
  EXPECT_EQ(acks, 3) << "the ACK and two repeats (QP " << b_qpn << ")";
}

// A QP that received nothing has no final ACK to repeat.
TEST(RcLoss, AQpThatAckedNothingRepeatsNothing) {
  Fake f;
  Pair& p = *f.p;
  p.b.qp.reset();
  EXPECT_EQ(p.b.counters().resp_final_acks_repeated, 0u);
}

// READ of 11 response packets; the 5th is lost: a requester that keeps no
// responses after a lost one (go-back-N) asks again for exactly the tail
// (PSN, VA and length of the missing part).  (One that keeps them asks for
// the lost one alone: rc_read_keep_test.)
TEST(RcLoss, DroppedReadResponseRerequestsTheTail) {
  Fake f(go_back_n());
  Pair& p = *f.p;
  const uint32_t len = 10 * 1024 + 100;
  f.drop_nth(f.b_ep, op::kRead, 5);
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), len, 4);
  Sge sge = p.a.sge(0, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::rdma_read, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  std::vector<WirePkt> reqs;
  for (auto& w : decode_all(f.net->recorded()))
    if (w.src == f.a_ep && w.opcode() == uint8_t(wire::Opcode::rc_read_request)) reqs.push_back(w);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].psn(), p.opt.psn_a);
  EXPECT_EQ(reqs[0].hdr.reth.length, len);
  EXPECT_EQ(reqs[1].psn(), p.opt.psn_a + 4);
  EXPECT_EQ(reqs[1].hdr.reth.va, p.b.addr(4 * 1024));
  EXPECT_EQ(reqs[1].hdr.reth.rkey, p.b.mr->rkey());
  EXPECT_EQ(reqs[1].hdr.reth.length, len - 4 * 1024);
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(cb.resp_dup_reads, 1u);
  EXPECT_EQ(ca.req_read_gaps, 1u);
  EXPECT_EQ(cb.resp_read_packets, 11u + 7u);
}

// A READ larger than one request segment, losing responses in the first and
// in a later segment: re-requests must stay within what was asked before.
TEST(RcLoss, DroppedResponsesInMultiSegmentRead) {
  PairOptions o;
  o.timeout = 16;  // 268 ms: recovery must not need it
  transport::CongestionConfig c;
  c.resend_wait_min = std::chrono::milliseconds(50);  // no watch resend on a slow machine
  o.congestion = c;
  Fake f(o);
  Pair& p = *f.p;
  const uint32_t len = 1u << 20;  // 1024 response packets, 4 request segments
  auto seen = std::make_shared<int>(0);
  const Endpoint b = f.b_ep;
  f.drop_if([=](const WirePkt& w) {
    if (w.src != b || !(w.flags & op::kRead)) return false;
    ++*seen;
    return *seen == 200 || *seen == 700;
  });
  fill_pattern(p.b.buf.data(), len, 5);
  Sge sge = p.a.sge(0, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::rdma_read, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_retry_exc, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u) << "gaps should be re-requested, not timed out";
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::rts);
  // Responses after each lost one were kept: the two alone went again.
  EXPECT_EQ(ca.req_read_holes, 2u);
  EXPECT_EQ(p.b.counters().resp_read_packets, 1024u + 2u);
}

// A READ of two request segments (MTU 4096: 256 response packets each): the
// request for the second is lost, then a response of the first.  The
// re-request must end where the first segment ends: the responder never got
// the second, and drops a request that runs into PSNs it has not seen (it
// did so before the segments were aligned: timeouts, then RETRY_EXC_ERR).
// (Go-back-N; a requester that keeps responses asks for the lost one alone,
// and its watch for the second segment again: rc_read_keep_test.)
TEST(RcLoss, ReRequestStopsAtTheSegmentTheResponderNeverGot) {
  PairOptions o = go_back_n();
  o.mtu = Mtu::m4096;
  o.timeout = 16;  // 268 ms: recovery must not need it
  o.buf_size = 4u << 20;
  Fake f(o);
  Pair& p = *f.p;
  const uint32_t len = 2u << 20;
  auto requests = std::make_shared<int>(0);
  auto responses = std::make_shared<int>(0);
  const Endpoint a = f.a_ep, b = f.b_ep;
  f.drop_if([=](const WirePkt& w) {
    if (w.src == a && w.opcode() == uint8_t(wire::Opcode::rc_read_request)) return ++*requests == 2;
    if (w.src == b && (w.flags & op::kRead)) return ++*responses == 200;
    return false;
  });
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), len, 11);
  Sge sge = p.a.sge(0, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::rdma_read, &sge, p.b.addr(0), p.b.mr->rkey())).ok());
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  std::vector<uint32_t> lens;
  for (auto& w : decode_all(f.net->recorded()))
    if (w.src == a && w.opcode() == uint8_t(wire::Opcode::rc_read_request)) lens.push_back(w.hdr.reth.length);
  // The first segment, the second (lost), the first's tail from the lost
  // response (the 200th: index 199), the second again.
  const std::vector<uint32_t> want = {256 * 4096, 256 * 4096, 57 * 4096, 256 * 4096};
  EXPECT_EQ(lens, want);
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(ca.req_read_gaps, 1u);
  EXPECT_EQ(cb.resp_len_errors, 0u);
  EXPECT_EQ(ca.req_window_cuts, 1u);
}

TEST(RcLoss, DroppedAtomicAckIsAnsweredFromTheReplayCache) {
  PairOptions o;
  o.timeout = 10;
  Fake f(o);
  Pair& p = *f.p;
  auto* target = reinterpret_cast<uint64_t*>(p.b.buf.data() + 64);
  *target = 100;
  f.drop_if([b = f.b_ep](const WirePkt& w) { return w.src == b && (w.flags & op::kAtomic); });
  Sge sge = p.a.sge(0, 8);
  SendWr faa = make_wr(1, WrOpcode::atomic_fetch_and_add, &sge, p.b.addr(64), p.b.mr->rkey());
  faa.compare_add = 5;
  ASSERT_TRUE(post_send(*p.a.qp, faa).ok());
  // Every atomic ACK is lost until we let the next one through.
  ASSERT_TRUE(wait_until([&] { return p.b.counters().resp_dup_atomics >= 2; }));
  f.net->set_filter({});
  expect_one(*p.a.scq, 1, WcOpcode::fetch_add, 8);
  uint64_t got;
  std::memcpy(&got, p.a.buf.data(), 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(*target, 105u) << "a retransmitted FETCH_ADD was applied again";

  // COMPARE_SWAP: executing it twice would return the swapped value.
  f.drop_nth(f.b_ep, op::kAtomic, 1);
  SendWr cas = make_wr(2, WrOpcode::atomic_cmp_and_swp, &sge, p.b.addr(64), p.b.mr->rkey());
  cas.compare_add = 105;
  cas.swap = 7;
  ASSERT_TRUE(post_send(*p.a.qp, cas).ok());
  expect_one(*p.a.scq, 2, WcOpcode::comp_swap, 8);
  std::memcpy(&got, p.a.buf.data(), 8);
  EXPECT_EQ(got, 105u);
  EXPECT_EQ(*target, 7u);
  Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_GE(cb.resp_dup_atomics, 3u);
  EXPECT_EQ(cb.resp_dup_atomics, ca.req_retransmits);
  EXPECT_EQ(ca.req_timeouts, ca.req_retransmits);
}

// Every packet in both directions arrives twice.

}  // namespace
}  // namespace uroce::test
