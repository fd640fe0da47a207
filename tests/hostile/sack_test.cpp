// UROCE_SACK_HELLO and UROCE_SACK (wire/sack.hpp) from an attacker: a
// responder sends SACKs only to a requester that asked, and they name
// exactly the PSNs it holds; a requester takes SACKs only after it asked,
// and a SACK, forged or not, completes nothing: it can only draw a resend.
#include "wire/sack.hpp"

#include <gtest/gtest.h>

#include "hostile.hpp"

namespace uroce::test {
namespace {

using wire::AckType;
using wire::NakCode;
using wire::Opcode;

std::vector<uint8_t> bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

std::vector<uint8_t> sack_hello(const Victim& v, const std::vector<uint8_t>& payload) {
  return Victim::packet(bth(uint8_t(Opcode::uroce_sack_hello), v.qp->qpn(), 0, false), payload);
}
std::vector<uint8_t> hello(const Victim& v) {
  const auto p = wire::sack_hello_payload();
  return sack_hello(v, {p.begin(), p.end()});
}

std::vector<uint8_t> sack(const Victim& v, uint32_t base, std::initializer_list<unsigned> bits, bool spoil = false) {
  wire::SackBitmap held{};
  for (unsigned b : bits) wire::set_sack_bit(held, b);
  auto p = wire::sack_payload(held);
  if (spoil) p[3] ^= 1;
  return Victim::packet(bth(uint8_t(Opcode::uroce_sack), v.qp->qpn(), base, false), p);
}

// The packets the victim sent the attacker since the last call, whole.
std::vector<std::pair<wire::Headers, std::vector<uint8_t>>> replies(Victim& v) {
  std::vector<std::pair<wire::Headers, std::vector<uint8_t>>> out;
  std::vector<net::RxPacket> rx(64);
  for (size_t n; (n = v.attacker->recv_batch(rx)) > 0;)
    for (size_t i = 0; i < n; ++i) {
      wire::Packet p;
      wire::DecodeError e;
      if (wire::decode(rx[i].data, p, e))
        out.emplace_back(p.hdr, std::vector<uint8_t>(p.payload.begin(), p.payload.end()));
    }
  return out;
}

size_t count_opcode(const std::vector<std::pair<wire::Headers, std::vector<uint8_t>>>& r, Opcode op) {
  size_t n = 0;
  for (const auto& [h, payload] : r) n += h.bth.opcode == uint8_t(op);
  return n;
}

TEST(HostileSack, OnlyARequesterThatAskedGetsSacksAndTheyNameWhatIsHeld) {
  Victim v;
  auto write_at = [&](uint32_t ahead) {
    return Victim::packet(write_only(v.qp->qpn(), (kRqPsn + ahead) & 0xffffff, v.all.addr(), v.all.rkey(), 64),
                          bytes(64, 0xee));
  };
  // Kept out of order, not asked: a NAK for the gap, no SACK.
  v.send({write_at(2), write_at(5)});
  auto r = replies(v);
  EXPECT_EQ(count_opcode(r, Opcode::uroce_sack), 0u);
  EXPECT_EQ(count_opcode(r, Opcode::rc_ack), 1u);
  // Hellos from a stranger, of another version, or too short ask nothing.
  auto bad_version = wire::sack_hello_payload();
  bad_version[4] = 2;
  v.send1(Victim::packet(bth(uint8_t(Opcode::uroce_sack_hello), v.qp->qpn(), 0, false), bad_version, kForeignIp),
          /*foreign=*/true);
  v.send({sack_hello(v, {bad_version.begin(), bad_version.end()}), sack_hello(v, {'u', 'R', 'S', 'K'})});
  auto c = v.counters();
  EXPECT_EQ(c.rx_foreign_source, 1u);
  EXPECT_EQ(c.rx_malformed, 2u);
  EXPECT_EQ(c.resp_sack_peers, 0u);
  v.send1(write_at(6));
  EXPECT_EQ(count_opcode(replies(v), Opcode::uroce_sack), 0u);
  // Asked: the next packet kept draws one SACK naming all three PSNs held.
  v.send1(hello(v));
  EXPECT_EQ(v.counters().resp_sack_peers, 1u);
  EXPECT_TRUE(replies(v).empty());  // a hello is not answered
  v.send1(write_at(9));
  r = replies(v);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].first.bth.opcode, uint8_t(Opcode::uroce_sack));
  EXPECT_EQ(r[0].first.bth.dest_qp, kPeerQpn);
  EXPECT_EQ(r[0].first.bth.psn, kRqPsn);  // the PSN expected
  wire::SackBitmap want{};
  for (unsigned ahead : {2u, 5u, 6u, 9u}) wire::set_sack_bit(want, ahead - 1);
  const auto payload = wire::sack_payload(want);
  EXPECT_EQ(r[0].second, std::vector<uint8_t>(payload.begin(), payload.end()));
  EXPECT_EQ(v.counters().resp_sacks_sent, 1u);
  v.expect_untouched("kept packets and hellos");
}

// The victim as requester: a 4-packet WRITE to the attacker.
// (The watch on una waits an hour: a packet goes again only for what the
// attacker sends; a loss-based window, which the test's slow round trips do
// not shrink.)
transport::CongestionConfig patient() {
  transport::CongestionConfig c;
  c.mode = transport::CcMode::none;
  c.resend_wait_min = std::chrono::hours(1);
  return c;
}

struct Requester {
  Victim v{patient()};
  uint32_t psn = 0x5000;
  Requester() {
    namespace m = qp_attr_mask;
    QpAttr a;
    a.qp_state = QpState::rts;
    a.sq_psn = psn;
    a.timeout = 18;  // 1 s: no retransmission during the test
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    const Status st =
        v.qp->modify(a, m::kState | m::kSqPsn | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  void write(uint64_t id, uint32_t len) {
    Sge sge{v.all.addr(), len, v.all.mr->lkey()};
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = WrOpcode::rdma_write;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = 0x1000;
    wr.rkey = 0x1234;
    size_t bad;
    ASSERT_TRUE(v.qp->post_send({&wr, 1}, &bad).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  std::vector<uint8_t> ack(uint32_t p, AckType t = AckType::ack, uint8_t value = wire::kCreditsInvalid) {
    wire::Headers h = bth(uint8_t(Opcode::rc_ack), v.qp->qpn(), p, false);
    h.aeth.syndrome = wire::make_syndrome(t, value);
    return Victim::packet(h, {});
  }
  int completions(uint64_t id) {
    Wc wc[4];
    auto n = v.cq->poll(wc);
    EXPECT_TRUE(n.ok());
    for (int i = 0; i < *n; ++i) {
      EXPECT_EQ(wc[i].wr_id, id + uint64_t(i));
      EXPECT_EQ(wc[i].status, WcStatus::success);
    }
    return *n;
  }
};

std::vector<uint32_t> request_psns(const std::vector<std::pair<wire::Headers, std::vector<uint8_t>>>& r) {
  std::vector<uint32_t> v;
  for (const auto& [h, payload] : r)
    if (wire::info(h.bth.opcode).flags & wire::op::kRequest) v.push_back(h.bth.psn);
  return v;
}

TEST(HostileSack, SacksAreTakenOnlyWhenAskedAndCompleteNothing) {
  Requester q;
  Victim& v = q.v;
  const uint32_t p = q.psn;
  q.write(1, 4096);
  EXPECT_EQ(request_psns(replies(v)), (std::vector<uint32_t>{p, p + 1, p + 2, p + 3}));
  // Not asked: a SACK saying all of it arrived is ignored.
  v.send1(sack(v, p + 4, {}));
  EXPECT_EQ(v.counters().req_sacks_ignored, 1u);
  EXPECT_EQ(q.completions(1), 0);
  // The attacker shows it keeps packets: a NAK for p + 1 draws a resend of
  // it alone, and an ACK beyond it says p + 2 and p + 3 were kept.  The
  // victim asks for SACKs.
  v.send1(q.ack(p + 1, AckType::nak, uint8_t(NakCode::psn_sequence_error)));
  EXPECT_EQ(request_psns(replies(v)), (std::vector<uint32_t>{p + 1}));
  v.send1(q.ack(p + 3));
  EXPECT_EQ(q.completions(1), 1);
  auto r = replies(v);
  ASSERT_EQ(count_opcode(r, Opcode::uroce_sack_hello), 1u);
  EXPECT_EQ(v.counters().req_sack_hellos, 1u);
  for (const auto& [h, payload] : r)
    if (h.bth.opcode == uint8_t(Opcode::uroce_sack_hello)) {
      EXPECT_TRUE(wire::parse_sack_hello(payload));
    }
  // An 8-packet WRITE, p + 4 .. p + 11.
  q.write(2, 8192);
  EXPECT_EQ(request_psns(replies(v)).size(), 8u);
  // Naming PSNs never sent, stale (before una), of another version: ignored.
  v.send({sack(v, p + 13, {0}), sack(v, p + 3, {0, 1}), sack(v, p + 4, {0, 1}, /*spoil=*/true)});
  auto c = v.counters();
  EXPECT_EQ(c.req_sacks_ignored, 4u);
  EXPECT_EQ(c.req_sacks_rcvd, 0u);
  EXPECT_TRUE(replies(v).empty());
  // Taken: p + 4 missing below PSNs held, p + 6 and p + 8 too.  Each goes
  // again once, nothing completes, and bits past what was sent count for
  // nothing.
  v.send1(sack(v, p + 4, {0, 2, 4, 5, 6, 7, 8, 9, 200}));
  EXPECT_EQ(request_psns(replies(v)), (std::vector<uint32_t>{p + 4, p + 6, p + 8}));
  c = v.counters();
  EXPECT_EQ(c.req_sacks_rcvd, 1u);
  EXPECT_EQ(c.req_sack_resends, 3u);
  EXPECT_EQ(q.completions(2), 0);
  // The same SACK again resends nothing more.
  v.send1(sack(v, p + 4, {0, 2, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(request_psns(replies(v)).empty());
  EXPECT_EQ(q.completions(2), 0);
  // A 4-packet WRITE after those resends, p + 12 .. p + 15.  A SACK that
  // holds p + 12 but still misses p + 4: its resend was lost too (the path
  // keeps order), so it goes again, once.
  q.write(3, 4096);
  std::vector<uint32_t> sent;
  for (int i = 0; i < 1000 && sent.size() < 4; ++i) {
    Wc none[1];  // a poll sends what was posted behind packets unacknowledged
    EXPECT_EQ(*v.cq->poll(none), 0);
    const std::vector<uint32_t> more = request_psns(replies(v));
    sent.insert(sent.end(), more.begin(), more.end());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(sent, (std::vector<uint32_t>{p + 12, p + 13, p + 14, p + 15}));
  v.send({sack(v, p + 4, {0, 1, 2, 3, 4, 5, 6, 7}), sack(v, p + 4, {0, 1, 2, 3, 4, 5, 6, 7})});
  EXPECT_EQ(request_psns(replies(v)), (std::vector<uint32_t>{p + 4}));
  EXPECT_EQ(v.counters().req_sack_resends, 4u);
  // Only the ACK completes them.
  v.send1(q.ack(p + 15));
  EXPECT_EQ(q.completions(2), 2);
  EXPECT_EQ(v.qp->state(), QpState::rts);
  v.expect_untouched("SACKs");
}

}  // namespace
}  // namespace uroce::test
