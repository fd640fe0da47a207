// Hostile XRC requests against an XRC_RECV QP of the victim with two XRC
// SRQs in its domain: a message that names one SRQ in its first packet and
// another in the next is refused (invalid request), its WQE completes in
// error on the first SRQ's CQ, and no byte lands in the second SRQ's WQE;
// an SRQ number of another process of the host that has no shared inbox
// (a domain of one process) is refused the same way.
#include "hostile.hpp"
#include "verbs/srq.hpp"
#include "verbs/xrcd.hpp"

namespace uroce::test {
namespace {

using wire::AckType;
using wire::NakCode;
using wire::Opcode;

struct XrcVictim : Victim {
  std::unique_ptr<Xrcd> xrcd = Xrcd::open(*ctx, -1, 0).value();
  std::unique_ptr<Cq> cq_a = Cq::create(*ctx, 16, nullptr).value();
  std::unique_ptr<Cq> cq_b = Cq::create(*ctx, 16, nullptr).value();
  std::unique_ptr<Srq> srq_a = srq(*cq_a, 0);
  std::unique_ptr<Srq> srq_b = srq(*cq_b, 4096);
  std::unique_ptr<Qp> tgt = target();
  uint32_t psn = kRqPsn;

  ~XrcVictim() {
    tgt.reset();
    srq_a.reset();
    srq_b.reset();
    cq_a.reset();
    cq_b.reset();
    xrcd.reset();
  }
  // An XRC SRQ with one WQE of 4 KiB at `off` of the receive region.
  std::unique_ptr<Srq> srq(Cq& c, size_t off) {
    XrcSrqInit x{xrcd.get(), &c};
    auto s = Srq::create(*pd, SrqAttr{4, 1, 0}, nullptr, &x).value();
    Sge g{recv.addr() + off, 4096, recv.mr->lkey()};
    RecvWr wr{100 + off, {&g, 1}};
    size_t bad = 0;
    EXPECT_TRUE(s->post_recv({&wr, 1}, &bad).ok());
    return s;
  }
  std::unique_ptr<Qp> target() {
    QpInitAttr init;
    init.qp_type = QpType::xrc_recv;
    init.xrcd = xrcd.get();
    auto q = std::move(Qp::create(xrcd->pd(), init).value());
    namespace m = qp_attr_mask;
    QpAttr a;
    a.qp_state = QpState::init;
    a.qp_access_flags = access::kRemoteWrite;
    EXPECT_TRUE(q->modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags).ok());
    a = QpAttr{};
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::m1024;
    a.dest_qp_num = kPeerQpn + 2;
    a.rq_psn = kRqPsn;
    a.ah_attr.dgid = kPeerIp;
    a.ah_attr.is_global = true;
    a.min_rnr_timer = 1;
    a.max_dest_rd_atomic = 4;
    const Status st = q->modify(
        a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMinRnrTimer | m::kMaxDestRdAtomic);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return q;
  }
  std::vector<uint8_t> xrc_send(Opcode op, uint32_t srqn, size_t len) {
    wire::Headers h = bth(uint8_t(op), tgt->qpn(), psn++);
    h.xrc_srqn = srqn;
    return packet(h, std::vector<uint8_t>(len, 0xEE));
  }
  std::vector<Wc> poll(Cq& c) {
    std::vector<Wc> out(8);
    const auto n = c.poll(out);
    out.resize(n.ok() ? size_t(*n) : 0);
    return out;
  }
  // The NAKs the victim sent: (code, PSN).
  std::vector<std::pair<uint8_t, uint32_t>> naks() {
    std::vector<std::pair<uint8_t, uint32_t>> out;
    for (const auto& h : answers())
      if (wire::aeth_type(h.aeth.syndrome) == AckType::nak)
        out.push_back({wire::aeth_value(h.aeth.syndrome), h.bth.psn});
    return out;
  }
};

TEST(HostileXrc, AMessageThatChangesItsSrqMidwayIsRefused) {
  XrcVictim v;
  const uint32_t before = uint32_t(v.counters().resp_xrc_srq_errors);
  v.send1(v.xrc_send(Opcode::xrc_send_first, v.srq_a->srq_num(), 1024));
  v.send1(v.xrc_send(Opcode::xrc_send_last, v.srq_b->srq_num(), 100));
  EXPECT_EQ(v.naks(), (std::vector<std::pair<uint8_t, uint32_t>>{{uint8_t(NakCode::invalid_request), kRqPsn + 1}}));
  EXPECT_EQ(v.counters().resp_xrc_srq_errors, before + 1);
  const auto a = v.poll(*v.cq_a);
  ASSERT_EQ(a.size(), 1u) << "the WQE the message held completes on its own SRQ's CQ";
  EXPECT_EQ(a[0].wr_id, 100u);
  EXPECT_EQ(a[0].status, WcStatus::rem_inv_req_err);
  EXPECT_TRUE(v.poll(*v.cq_b).empty());
  // The first packet's bytes landed in A's WQE (it was valid); B's is untouched.
  EXPECT_EQ(std::memcmp(v.recv.mem->data() + 4096, v.recv.snapshot.data() + 4096, 4096), 0);
  EXPECT_EQ(v.tgt->query().qp_state, QpState::err);
}

// A FIRST naming another SRQ in the middle of a message (an opcode sequence
// error too): the held WQE still completes on its own SRQ's CQ.
TEST(HostileXrc, ANewMessageOfAnotherSrqMidwayIsRefused) {
  XrcVictim v;
  v.send1(v.xrc_send(Opcode::xrc_send_first, v.srq_a->srq_num(), 1024));
  v.send1(v.xrc_send(Opcode::xrc_send_first, v.srq_b->srq_num(), 1024));
  EXPECT_EQ(v.naks(), (std::vector<std::pair<uint8_t, uint32_t>>{{uint8_t(NakCode::invalid_request), kRqPsn + 1}}));
  const auto a = v.poll(*v.cq_a);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].wr_id, 100u);
  EXPECT_EQ(a[0].status, WcStatus::rem_inv_req_err);
  EXPECT_TRUE(v.poll(*v.cq_b).empty());
  EXPECT_EQ(std::memcmp(v.recv.mem->data() + 4096, v.recv.snapshot.data() + 4096, 4096), 0);
}

TEST(HostileXrc, AnSrqOfAnotherSlotWithoutAnInboxIsRefused) {
  XrcVictim v;
  // Slot 1000 is nobody's in this test's registry: no inbox to hand to.
  v.send1(v.xrc_send(Opcode::xrc_send_only, (1000u << 14) | 1, 64));
  EXPECT_EQ(v.naks(), (std::vector<std::pair<uint8_t, uint32_t>>{{uint8_t(NakCode::invalid_request), kRqPsn}}));
  EXPECT_EQ(v.counters().resp_xrc_srq_errors, 1u);
  EXPECT_TRUE(v.poll(*v.cq_a).empty());
  EXPECT_TRUE(v.poll(*v.cq_b).empty());
  v.expect_untouched("an SRQ of nobody");
}

}  // namespace
}  // namespace uroce::test
