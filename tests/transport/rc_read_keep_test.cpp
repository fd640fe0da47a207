// READ responses out of order (transport/read_keep.cpp) on a FakeNetwork
// that loses chosen packets: the requester places the responses that follow
// a lost one, asks again for the lost ones alone, and completes its READs
// (and the SENDs between them) in order, byte-exact, without a timeout.
#include "fake_wire.hpp"

namespace uroce::test {
namespace {

namespace op = wire::op;

// A resend (here: a READ request for a hole) goes again only after `wait`
// without progress; the QP's own timeout is 268 ms (16): never needed.
PairOptions patient(std::chrono::milliseconds wait, PairOptions o = {}) {
  transport::CongestionConfig c;
  c.resend_wait_min = wait;
  o.congestion = c;
  o.timeout = 16;
  return o;
}

// A's READ requests as sent: PSN (from the first), VA offset in B's buffer
// and length.
struct ReadReq {
  uint32_t psn;
  uint64_t off;
  uint32_t len;
  bool operator==(const ReadReq&) const = default;
};
std::ostream& operator<<(std::ostream& os, const ReadReq& r) {
  return os << "{psn " << r.psn << " off " << r.off << " len " << r.len << "}";
}
std::vector<ReadReq> read_requests(Fake& f) {
  std::vector<ReadReq> v;
  for (const WirePkt& w : decode_all(f.net->recorded()))
    if (w.ok && w.src == f.a_ep && w.opcode() == uint8_t(wire::Opcode::rc_read_request))
      v.push_back({w.psn() - f.p->opt.psn_a, w.hdr.reth.va - f.p->b.addr(0), w.hdr.reth.length});
  return v;
}

// Drops B's READ responses whose PSN (from A's first) is listed, each once
// for every time it is listed.
void lose_responses(Fake& f, std::vector<uint32_t> lost) { f.lose_psns(f.b_ep, op::kRead, std::move(lost)); }

void post_read(Pair& p, uint64_t id, uint32_t off, uint32_t len) {
  Sge sge = p.a.sge(off, len);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::rdma_read, &sge, p.b.addr(off), p.b.mr->rkey())).ok());
}

// READ of 11 response packets; the 5th is lost: the 6 after it are kept,
// and a READ request for the 5th alone (its PSN, VA, one MTU) follows.
TEST(RcReadKeep, OnlyTheLostResponseIsAskedForAgain) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  const uint32_t len = 10 * 1024 + 100;
  lose_responses(f, {4});
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), len, 4);
  post_read(p, 1, 0, len);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  const std::vector<ReadReq> want = {{0, 0, len}, {4, 4 * 1024, 1024}};
  EXPECT_EQ(read_requests(f), want);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_read_kept, 6u);
  EXPECT_EQ(ca.req_read_holes, 1u);
  EXPECT_EQ(ca.req_read_gaps, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_dup_reads, 1u);
  EXPECT_EQ(cb.resp_read_packets, 11u + 1u);
}

// Two holes in one READ: the second is asked for as soon as the first is
// filled (the responses kept after it say it is missing), not by the watch,
// and its request ends at the first response kept after it.
TEST(RcReadKeep, HolesAreAskedForOneAfterAnother) {
  Fake f(patient(std::chrono::hours(1)));
  Pair& p = *f.p;
  const uint32_t len = 16 * 1024;
  lose_responses(f, {3, 8, 9});
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), len, 6);
  post_read(p, 1, 0, len);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  const std::vector<ReadReq> want = {{0, 0, len}, {3, 3 * 1024, 1024}, {8, 8 * 1024, 2 * 1024}};
  EXPECT_EQ(read_requests(f), want);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_read_holes, 2u);
  EXPECT_EQ(ca.req_sr_rd_atomic_resends, 0u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_read_packets, 16u + 3u);
}

// A READ of two request segments (300 responses, 256 a segment): response
// 200 lost, and the request for the second segment; the SEND after the
// READ draws a sequence NAK for the second segment's first PSN.  That NAK
// says nothing of response 200: una stays at it (it used to move past it,
// and the READ waited for responses it then dropped as stale until its
// retries ran out), the hole is asked for and the segment again.
TEST(RcReadKeep, ANakPastAMissingResponseLeavesUnaAtIt) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  const uint32_t base = p.opt.psn_a;
  const Endpoint a = f.a_ep, b = f.b_ep;
  auto lost = std::make_shared<int>(0);
  f.drop_if([=](const WirePkt& w) {
    const uint32_t psn = w.psn() - base;
    if (w.src == a && w.opcode() == uint8_t(wire::Opcode::rc_read_request) && psn == 256 && !(*lost & 1))
      return (*lost |= 1), true;
    if (w.src == b && (w.flags & op::kRead) && psn == 200 && !(*lost & 2)) return (*lost |= 2), true;
    return false;
  });
  const uint32_t len = 300 * 1024;
  fill_pattern(p.b.buf.data(), len, 12);
  fill_pattern(p.a.buf.data() + (512 << 10), 64, 13);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(512 << 10, 64)}).ok());
  post_read(p, 1, 0, len);
  Sge sge = p.a.sge(512 << 10, 64);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  expect_one(*p.a.scq, 2, WcOpcode::send, 64);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 64);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + (512 << 10), p.b.buf.data() + (512 << 10), 64), -1);
  EXPECT_EQ(*lost, 3);
  const Counters ca = p.a.counters();
  EXPECT_GE(ca.req_read_holes, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::rts);
}

// The lost response is lost again when asked for: nothing follows it to say
// so, and the watch asks for it again after about two round trips (here at
// least 50 ms), long before the QP's timeout, without using up a retry.
TEST(RcReadKeep, AHoleLostAgainIsAskedForByTheWatch) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  const uint32_t len = 8 * 1024;
  lose_responses(f, {2, 2});
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), len, 7);
  post_read(p, 1, 0, len);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, len);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), len), -1);
  const std::vector<ReadReq> want = {{0, 0, len}, {2, 2 * 1024, 1024}, {2, 2 * 1024, 1024}};
  EXPECT_EQ(read_requests(f), want);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_read_holes, 2u);
  EXPECT_EQ(ca.req_sr_rd_atomic_resends, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_read_packets, 8u + 2u);
}

// The first READ's last response lost: the second READ's responses are kept
// while it is asked for, and both complete, in order, once it arrives.
TEST(RcReadKeep, ALaterReadsResponsesAreKeptWhileAnEarlierOnesTailIsMissing) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  lose_responses(f, {3});
  f.net->set_recording(true);
  fill_pattern(p.b.buf.data(), 8 * 1024, 8);
  post_read(p, 1, 0, 4 * 1024);
  post_read(p, 2, 4 * 1024, 4 * 1024);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, 4 * 1024);
  expect_one(*p.a.scq, 2, WcOpcode::rdma_read, 4 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 8 * 1024), -1);
  const std::vector<ReadReq> want = {{0, 0, 4096}, {4, 4096, 4096}, {3, 3 * 1024, 1024}};
  EXPECT_EQ(read_requests(f), want);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  EXPECT_EQ(ca.req_read_kept, 4u);
  EXPECT_EQ(ca.req_timeouts, 0u);
  EXPECT_EQ(cb.resp_read_packets, 8u + 1u);
}

// READ, SEND, READ; the first READ's last response and every plain ACK are
// lost.  The second READ's responses, kept, say B executed the SEND: it
// completes between the two READs, with no ACK and no timeout.
TEST(RcReadKeep, ASendBetweenReadsIsAcknowledgedByTheLaterReadsResponses) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  const uint32_t base = p.opt.psn_a;
  const Endpoint b = f.b_ep;
  auto tail_lost = std::make_shared<bool>(false);
  f.drop_if([=](const WirePkt& w) {
    if (w.src != b) return false;
    if (w.flags & op::kAck) return true;
    if (!(w.flags & op::kRead) || w.psn() - base != 3 || *tail_lost) return false;
    return *tail_lost = true;
  });
  fill_pattern(p.b.buf.data(), 8 * 1024, 9);
  fill_pattern(p.a.buf.data() + (16 << 10), 100, 10);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(16 << 10, 100)}).ok());
  post_read(p, 1, 0, 4 * 1024);
  Sge sge = p.a.sge(16 << 10, 100);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::send, &sge)).ok());
  post_read(p, 3, 4 * 1024, 4 * 1024);
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, 4 * 1024);
  expect_one(*p.a.scq, 2, WcOpcode::send, 100);
  expect_one(*p.a.scq, 3, WcOpcode::rdma_read, 4 * 1024);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 100);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 8 * 1024), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + (16 << 10), p.b.buf.data() + (16 << 10), 100), -1);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_acks_rcvd, 0u);
  EXPECT_EQ(ca.req_read_holes, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

// READ, then a SEND the peer has no receive for, rnr_retry 0: the READ's
// second response is lost, and the first request for it, so the RNR NAK
// for the SEND surely arrives while it is missing.  Failing the SEND then
// would complete the READ with a hole in its data; the NAK waits, the READ
// completes byte-exact (the watch asks again), and the SEND fails when its
// resend draws the RNR NAK again.
TEST(RcReadKeep, AnRnrNakBehindAMissingResponseWaitsForIt) {
  PairOptions o = patient(std::chrono::milliseconds(50));
  o.rnr_retry = 0;
  Fake f(o);
  Pair& p = *f.p;
  const uint32_t base = p.opt.psn_a;
  const Endpoint a = f.a_ep, b = f.b_ep;
  auto lost = std::make_shared<int>(0);
  f.drop_if([=](const WirePkt& w) {
    const uint32_t psn = w.psn() - base;
    auto once = [&](int bit) { return !(*lost & bit) && (*lost |= bit, true); };
    if (w.src == b && (w.flags & op::kRead) && psn == 1) return once(1);
    if (w.src == a && w.opcode() == uint8_t(wire::Opcode::rc_read_request) && psn == 1) return once(2);
    return false;
  });
  fill_pattern(p.b.buf.data(), 4 * 1024, 14);
  post_read(p, 1, 0, 4 * 1024);
  Sge sge = p.a.sge(8 << 10, 64);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::send, &sge)).ok());
  auto wc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success) << to_string(wc[0].status);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 4 * 1024), -1);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::rnr_retry_exc_err) << to_string(wc[1].status);
  EXPECT_EQ(*lost, 3);
  EXPECT_GE(p.a.counters().req_rnr_naks_rcvd, 2u);
}

// The READ's hole request is lost, and the first SEND after the READ: the
// second SEND draws a sequence NAK for the first while the hole is still
// missing.  The watch stays on the hole (it moved to the SEND's resend and
// left the hole to the QP's 268 ms timeout), and everything completes
// without a timeout.
TEST(RcReadKeep, ASequenceNakBehindAHoleLeavesTheHoleWatched) {
  Fake f(patient(std::chrono::milliseconds(50)));
  Pair& p = *f.p;
  const uint32_t base = p.opt.psn_a;
  const Endpoint a = f.a_ep, b = f.b_ep;
  auto lost = std::make_shared<int>(0);
  f.drop_if([=](const WirePkt& w) {
    const uint32_t psn = w.psn() - base;
    auto once = [&](int bit) { return !(*lost & bit) && (*lost |= bit, true); };
    if (w.src == b && (w.flags & op::kRead) && psn == 1) return once(1);
    if (w.src == a && w.opcode() == uint8_t(wire::Opcode::rc_read_request) && psn == 1) return once(2);
    if (w.src == a && (w.flags & op::kSend) && psn == 4) return once(4);
    return false;
  });
  fill_pattern(p.b.buf.data(), 4 * 1024, 15);
  fill_pattern(p.a.buf.data() + (8 << 10), 128, 16);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(8 << 10, 64)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 8, {p.b.sge((8 << 10) + 64, 64)}).ok());
  post_read(p, 1, 0, 4 * 1024);
  Sge s1 = p.a.sge(8 << 10, 64), s2 = p.a.sge((8 << 10) + 64, 64);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(2, WrOpcode::send, &s1)).ok());
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(3, WrOpcode::send, &s2)).ok());
  expect_one(*p.a.scq, 1, WcOpcode::rdma_read, 4 * 1024);
  expect_one(*p.a.scq, 2, WcOpcode::send, 64);
  expect_one(*p.a.scq, 3, WcOpcode::send, 64);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 64);
  expect_one(*p.b.rcq, 8, WcOpcode::recv, 64);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 4 * 1024), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + (8 << 10), p.b.buf.data() + (8 << 10), 128), -1);
  EXPECT_EQ(*lost, 7);
  const Counters ca = p.a.counters();
  EXPECT_EQ(ca.req_seq_naks_rcvd, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

// 1% of the packets lost each way over 16 READs of 256 KiB (MTU 4096): each
// response lost is asked for again alone, about once (a lost request, or
// a round trip slower than 50 ms, costs one more), never a tail or a
// segment of responses that had arrived.
TEST(RcReadKeep, RandomLossOnReadsResendsWhatWasLost) {
  PairOptions o = patient(std::chrono::milliseconds(50));
  o.timeout = 17;
  o.mtu = Mtu::m4096;
  o.buf_size = 4 << 20;
  o.wrap = random_drops(0.01, 7);
  Fake f(o);
  Pair& p = *f.p;
  fill_pattern(p.b.buf.data(), 4 << 20, 11);
  for (uint32_t i = 0; i < 16; ++i) post_read(p, i, i << 18, 1 << 18);
  for (uint32_t i = 0; i < 16; ++i) expect_one(*p.a.scq, i, WcOpcode::rdma_read, 1 << 18, 20000);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 4 << 20), -1);
  const Counters ca = p.a.counters(), cb = p.b.counters();
  const uint64_t resent = cb.resp_read_packets - 16 * 64;
  EXPECT_GE(cb.fault_tx_dropped, 1u);
  EXPECT_GE(resent, cb.fault_tx_dropped);
  EXPECT_LE(resent, cb.fault_tx_dropped + 16);
  EXPECT_GE(ca.req_read_holes, 1u);
  EXPECT_EQ(ca.req_timeouts, 0u);
}

}  // namespace
}  // namespace uroce::test
