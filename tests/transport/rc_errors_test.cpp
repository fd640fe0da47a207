// RC error paths: remote access and invalid-request NAKs, local protection
// and length errors, the ERR state with its flushes, post-time argument
// checks, CQ overflow.  Failed remote operations leave the responder's
// memory untouched, byte for byte, including the bytes around the MR.
#include "loopback.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
constexpr size_t kRegion = 64 << 10;  // B's target MR covers [kRegion, 2*kRegion) of its buffer

enum class Key { good, wrong, other_pd };
struct Case {
  const char* name;
  WrOpcode op;
  uint32_t mr_access = kAll;
  uint32_t qp_access = ~0u;  // B's QP access flags (~0u: all remote rights)
  int64_t offset = 0;        // remote address relative to the MR start
  uint32_t len = 4000;
  Key key = Key::good;
  WcStatus want = WcStatus::rem_access_err;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

uint32_t atomic_len(const Case& c) { return is_atomic_opcode(c.op) ? 8 : c.len; }

class RcRemoteErrors : public ::testing::TestWithParam<Case> {};

TEST_P(RcRemoteErrors, FailsFlushesAndLeavesMemoryAlone) {
  const Case& c = GetParam();
  PairOptions o;
  o.buf_size = 3 * kRegion;
  if (c.qp_access != ~0u) o.qp_access = c.qp_access;
  Pair p(o);
  auto target = reg_mr(*p.b.pd, p.b.buf.data() + kRegion, kRegion, c.mr_access);
  auto other_pd = Pd::create(*p.b.ctx).value();
  Pd& other = *other_pd;
  auto foreign = reg_mr(other, p.b.buf.data() + kRegion, kRegion, kAll);
  ASSERT_TRUE(target && foreign);
  fill_pattern(p.b.buf.data(), p.b.buf.size(), 11);
  const std::vector<uint8_t> before = p.b.buf;
  fill_pattern(p.a.buf.data(), 8192, 12);
  ASSERT_TRUE(post_recv(*p.b.qp, 50, {p.b.sge(0, 100)}).ok());

  Sge s = p.a.sge(0, atomic_len(c));
  Sge small = p.a.sge(0, 10);
  SendWr wrs[3];
  wrs[0].wr_id = 1;
  wrs[0].opcode = c.op;
  wrs[0].send_flags = send_flags::kSignaled;
  wrs[0].sg_list = {&s, 1};
  wrs[0].remote_addr = p.b.addr(kRegion) + uint64_t(c.offset);
  wrs[0].rkey = c.key == Key::good       ? target->rkey()
                : c.key == Key::other_pd ? foreign->rkey()
                                         : target->rkey() ^ 0x10204080;
  wrs[0].compare_add = 1;
  wrs[1].wr_id = 2;  // signaled SEND behind it
  wrs[1].opcode = WrOpcode::send;
  wrs[1].send_flags = send_flags::kSignaled;
  wrs[1].sg_list = {&small, 1};
  wrs[2] = wrs[1];  // unsignaled WRITE: flushed WRs complete regardless
  wrs[2].wr_id = 3;
  wrs[2].opcode = WrOpcode::rdma_write;
  wrs[2].send_flags = 0;
  wrs[2].remote_addr = p.b.addr(0);
  wrs[2].rkey = p.b.mr->rkey();
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 3);
  ASSERT_EQ(sc.size(), 3u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[0].status, c.want);
  EXPECT_EQ(sc[0].qp_num, p.a.qp->qpn());
  EXPECT_EQ(sc[1].wr_id, 2u);
  EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
  EXPECT_EQ(sc[1].opcode, WcOpcode::send);
  EXPECT_EQ(sc[2].wr_id, 3u);
  EXPECT_EQ(sc[2].status, WcStatus::wr_flush_err);
  EXPECT_EQ(sc[2].opcode, WcOpcode::rdma_write);
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
  // Later WRs are flushed too.
  SendWr later = wrs[1];
  later.wr_id = 4;
  ASSERT_TRUE(post_send(*p.a.qp, later).ok());
  sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 4u);
  EXPECT_EQ(sc[0].status, WcStatus::wr_flush_err);
  // The responder answers as IBA class C (and rxe): NAK, then its QP enters
  // ERR.  The receive a WRITE with immediate took completes with the error;
  // any other posted receive is flushed.  The SEND behind is never delivered.
  auto rc = drain(*p.b.rcq, 20);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 50u);
  EXPECT_EQ(rc[0].status, c.op == WrOpcode::rdma_write_with_imm ? c.want : WcStatus::wr_flush_err);
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);
  EXPECT_EQ(p.b.counters().resp_qp_errors, 1u);
  EXPECT_EQ(first_diff(before.data(), p.b.buf.data(), before.size()), -1);
  // Reported on the first attempt: one NAK, nothing retransmitted.
  if (c.want == WcStatus::rem_access_err)
    EXPECT_EQ(p.b.counters().resp_access_naks_sent, 1u);
  else
    EXPECT_EQ(p.b.counters().resp_inv_req_naks_sent, 1u);
  EXPECT_EQ(p.a.counters().req_err_naks_rcvd, 1u);
  EXPECT_EQ(p.a.counters().req_retransmits, 0u);
}

const uint32_t kNoRemoteWrite = kAll & ~access::kRemoteWrite;
const uint32_t kNoRemoteRead = kAll & ~access::kRemoteRead;
const uint32_t kNoRemoteAtomic = kAll & ~access::kRemoteAtomic;
const uint32_t kQpAll = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

INSTANTIATE_TEST_SUITE_P(
    Cases, RcRemoteErrors,
    ::testing::Values(
        Case{"WriteWrongRkey", WrOpcode::rdma_write, kAll, ~0u, 0, 4000, Key::wrong},
        Case{"WriteImmWrongRkey", WrOpcode::rdma_write_with_imm, kAll, ~0u, 0, 100, Key::wrong},
        Case{"ReadWrongRkey", WrOpcode::rdma_read, kAll, ~0u, 0, 4000, Key::wrong},
        Case{"AtomicWrongRkey", WrOpcode::atomic_fetch_and_add, kAll, ~0u, 0, 8, Key::wrong},
        Case{"WriteOneBytePastEnd", WrOpcode::rdma_write, kAll, ~0u, int64_t(kRegion) - 3999, 4000},
        Case{"ReadOneBytePastEnd", WrOpcode::rdma_read, kAll, ~0u, int64_t(kRegion) - 3999, 4000},
        Case{"WriteOneByteBeforeStart", WrOpcode::rdma_write, kAll, ~0u, -1, 4000},
        Case{"AtomicPastEnd", WrOpcode::atomic_fetch_and_add, kAll, ~0u, int64_t(kRegion), 8},
        Case{"MrWithoutRemoteWrite", WrOpcode::rdma_write, kNoRemoteWrite},
        Case{"MrWithoutRemoteRead", WrOpcode::rdma_read, kNoRemoteRead},
        Case{"MrWithoutRemoteAtomic", WrOpcode::atomic_fetch_and_add, kNoRemoteAtomic},
        Case{"MrWithoutRemoteAtomicCas", WrOpcode::atomic_cmp_and_swp, kNoRemoteAtomic},
        Case{"QpWithoutRemoteWrite", WrOpcode::rdma_write, kAll, kQpAll & ~access::kRemoteWrite},
        Case{"QpWithoutRemoteRead", WrOpcode::rdma_read, kAll, kQpAll & ~access::kRemoteRead},
        Case{"QpWithoutRemoteAtomic", WrOpcode::atomic_fetch_and_add, kAll, kQpAll & ~access::kRemoteAtomic},
        Case{"WriteRkeyOfAnotherPd", WrOpcode::rdma_write, kAll, ~0u, 0, 4000, Key::other_pd},
        Case{"ReadRkeyOfAnotherPd", WrOpcode::rdma_read, kAll, ~0u, 0, 4000, Key::other_pd},
        Case{"MisalignedAtomic", WrOpcode::atomic_fetch_and_add, kAll, ~0u, 4, 8, Key::good, WcStatus::rem_inv_req_err},
        Case{"MisalignedCas", WrOpcode::atomic_cmp_and_swp, kAll, ~0u, 12, 8, Key::good, WcStatus::rem_inv_req_err}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// A SEND larger than the receive: the requester gets REM_INV_REQ_ERR, the
// receive completes LOC_LEN_ERR, nothing is written past the receive buffer.
TEST(RcErrors, SendLargerThanReceive) {
  Pair p;
  fill_pattern(p.a.buf.data(), 3000, 1);
  std::memset(p.b.buf.data(), 0x77, 8192);
  ASSERT_TRUE(post_recv(*p.b.qp, 31, {p.b.sge(0, 1500)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 32, {p.b.sge(4096, 4096)}).ok());
  Sge s = p.a.sge(0, 3000);
  SendWr wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 9u);
  EXPECT_EQ(sc[0].status, WcStatus::rem_inv_req_err);
  auto rc = poll_n(*p.b.rcq, 2);
  ASSERT_EQ(rc.size(), 2u);
  EXPECT_EQ(rc[0].wr_id, 31u);
  EXPECT_EQ(rc[0].status, WcStatus::loc_len_err);
  EXPECT_EQ(rc[0].qp_num, p.b.qp->qpn());
  // The responder QP is in ERR now (IBA 9.9.3): its other receive is flushed.
  EXPECT_EQ(rc[1].wr_id, 32u);
  EXPECT_EQ(rc[1].status, WcStatus::wr_flush_err);
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::err);
  for (size_t i = 1500; i < 8192; ++i) ASSERT_EQ(p.b.buf[i], 0x77) << "byte " << i;
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
}

// Local protection errors: a bad lkey, an lkey of another PD, a READ into an
// MR without LOCAL_WRITE.  Nothing goes on the wire.
// Local protection errors: a bad lkey, an lkey of another PD.  Nothing goes
// on the wire: a SEND's or WRITE's local keys are checked before its data
// leaves.
TEST(RcErrors, LocalProtectionErrors) {
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant);
    Pair p;
    auto other_pd = Pd::create(*p.a.ctx).value();
    Pd& other = *other_pd;
    auto foreign = reg_mr(other, p.a.buf.data(), 4096, kAll);
    Sge s = p.a.sge(0, 100);
    SendWr wr;
    wr.wr_id = 5;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    wr.opcode = WrOpcode::rdma_write;
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    if (variant == 0) s.lkey = p.a.mr->lkey() ^ 0x00800001;
    if (variant == 1) s.lkey = foreign->lkey();
    const uint64_t sent = p.a.counters().req_packets;
    SendWr after = wr;
    after.wr_id = 6;
    after.sg_list = {};
    SendWr both[2] = {wr, after};
    size_t bad;
    ASSERT_TRUE(p.a.qp->post_send(both, &bad).ok());
    auto sc = poll_n(*p.a.scq, 2);
    ASSERT_EQ(sc.size(), 2u);
    EXPECT_EQ(sc[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(sc[0].wr_id, 5u);
    EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(sc[1].wr_id, 6u);
    EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
    EXPECT_EQ(p.a.counters().req_packets, sent);
  }
}

// A READ's local keys are checked when its response lands, as on a NIC: the
// request goes out, the peer answers, and the response into an MR without
// LOCAL_WRITE completes LOC_PROT_ERR with not a byte written.
TEST(RcErrors, ReadIntoAReadOnlyRegionFailsWhenTheResponseLands) {
  Pair p;
  auto ro = reg_mr(*p.a.pd, p.a.buf.data(), 4096, access::kRemoteRead);
  std::memset(p.a.buf.data(), 0x5a, 4096);
  std::memset(p.b.buf.data(), 0xc3, 4096);
  Sge s{reinterpret_cast<uintptr_t>(p.a.buf.data()), 100, ro->lkey()};
  SendWr wr;
  wr.wr_id = 5;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.opcode = WrOpcode::rdma_read;
  wr.remote_addr = p.b.addr(0);
  wr.rkey = p.b.mr->rkey();
  const uint64_t sent = p.a.counters().req_packets;
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::loc_prot_err);
  EXPECT_EQ(p.a.counters().req_packets, sent + 1) << "the request went out";
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(uint8_t(p.a.buf[i]), 0x5a) << "byte " << i;
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::rts);
}

// UC has no READ and no atomics: posted, they complete LOC_QP_OP_ERR.
TEST(RcErrors, UcCannotReadOrAtomic) {
  for (WrOpcode opc :
       {WrOpcode::rdma_read, WrOpcode::atomic_fetch_and_add, WrOpcode::atomic_cmp_and_swp, WrOpcode::send_with_inv}) {
    SCOPED_TRACE(int(opc));
    PairOptions uo;
    uo.type = QpType::uc;
    Pair uc(uo);
    Sge s = uc.a.sge(0, 8);
    SendWr w;
    w.wr_id = 9;
    w.opcode = opc;
    w.send_flags = send_flags::kSignaled;
    w.sg_list = {&s, 1};
    w.remote_addr = uc.b.addr(0);
    w.rkey = uc.b.mr->rkey();
    ASSERT_TRUE(post_send(*uc.a.qp, w).ok());
    auto sc = poll_n(*uc.a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].wr_id, 9u);
    EXPECT_EQ(sc[0].status, WcStatus::loc_qp_op_err);
    EXPECT_EQ(uc.a.qp->query().qp_state, QpState::err);
  }
}

TEST(RcErrors, PostArgumentErrors) {
  PairOptions o;
  o.max_send_wr = 4;
  o.max_recv_wr = 4;
  Pair p(o);
  Sge five[5] = {p.a.sge(0, 1), p.a.sge(1, 1), p.a.sge(2, 1), p.a.sge(3, 1), p.a.sge(4, 1)};
  SendWr ok;
  ok.opcode = WrOpcode::rdma_write;
  ok.send_flags = send_flags::kSignaled;
  ok.sg_list = {five, 1};
  ok.remote_addr = p.b.addr(0);
  ok.rkey = p.b.mr->rkey();
  SendWr too_many = ok;
  too_many.sg_list = {five, 5};
  SendWr list[3] = {ok, too_many, ok};
  size_t bad = 99;
  Status s = p.a.qp->post_send(list, &bad);
  EXPECT_EQ(s.code(), EINVAL) << s.to_string();
  EXPECT_EQ(bad, 1u);
  // Full send queue: the 5th of 5 does not fit (nothing can retire while
  // post_send holds the engine).
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);  // the one WR before the bad one: the SQ is empty again
  SendWr five_wrs[5] = {ok, ok, ok, ok, ok};
  bad = 99;
  s = p.a.qp->post_send(five_wrs, &bad);
  EXPECT_EQ(s.code(), ENOMEM) << s.to_string();
  EXPECT_EQ(bad, 4u);
  // Opcodes uroce does not implement are refused at post; those the QP's
  // transport lacks are posted and fail at execution (transport.Ud.*,
  // RcErrors.UcCannotReadOrAtomic).
  for (WrOpcode opc : {WrOpcode(10), WrOpcode(200)}) {
    SendWr w;
    w.opcode = opc;
    bad = 99;
    EXPECT_EQ(p.a.qp->post_send({&w, 1}, &bad).code(), EINVAL) << int(opc);
    EXPECT_EQ(bad, 0u);
  }
  // A QP in RESET takes neither sends nor receives.
  auto fresh = p.create_qp(p.a);
  ASSERT_TRUE(fresh);
  bad = 99;
  EXPECT_EQ(fresh->post_send({&ok, 1}, &bad).code(), EINVAL);
  EXPECT_EQ(bad, 0u);
  RecvWr rw{1, {five, 1}};
  bad = 99;
  EXPECT_EQ(fresh->post_recv({&rw, 1}, &bad).code(), EINVAL);
  EXPECT_EQ(bad, 0u);
  // Receive queue: too many SGEs, then full.
  RecvWr rws[6] = {rw, rw, {2, {five, 5}}, rw, rw, rw};
  bad = 99;
  EXPECT_EQ(p.b.qp->post_recv({rws, 6}, &bad).code(), EINVAL);
  EXPECT_EQ(bad, 2u);
  RecvWr more[3] = {rw, rw, rw};
  bad = 99;
  EXPECT_EQ(p.b.qp->post_recv(more, &bad).code(), ENOMEM);
  EXPECT_EQ(bad, 2u);  // 2 were queued before: 2 more fit
}

TEST(RcErrors, CqOverflowIsReported) {
  PairOptions o;
  o.cqe = 4;
  Pair p(o);
  Sge s = p.a.sge(0, 64);
  std::vector<SendWr> wrs(8);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::rdma_write;
    wrs[i].send_flags = send_flags::kSignaled;
    wrs[i].sg_list = {&s, 1};
    wrs[i].remote_addr = p.b.addr(0);
    wrs[i].rkey = p.b.mr->rkey();
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  ASSERT_TRUE(wait_until([&] { return p.a.counters().cq_overflows == 4; }));
  EXPECT_EQ(p.a.counters().completions, 4u);
  Wc wc[8];
  auto r = p.a.scq->poll(wc);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(wc[i].wr_id, uint64_t(i));
  r = p.a.scq->poll(wc);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EOVERFLOW);
  auto ev = p.a.ctx->get_async_event();
  ASSERT_TRUE(ev.ok()) << ev.status().to_string();
  EXPECT_EQ(ev->type, AsyncEventType::cq_err);
  EXPECT_EQ(ev->element, p.a.scq.get());
}

}  // namespace
}  // namespace uroce::test
