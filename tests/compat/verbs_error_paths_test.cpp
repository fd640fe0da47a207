// The verbs on their error paths as rdma-core over a NIC answers (issue 17):
// each case asserts the exact status and the bytes on both sides.
#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

// Posts a signaled SEND of `s` on `from`.
void send(ibv_qp* from, ibv_sge s, uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(from, &wr, &bad), 0);
}

int post_srq(ibv_srq* srq, uint64_t wr_id, ibv_sge s) {
  ibv_recv_wr r{};
  r.wr_id = wr_id;
  r.sg_list = &s;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &r, &bad);
}

ibv_ah* ah_to_self(ibv_pd* pd, const ibv_gid& gid) {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.grh.dgid = gid;
  a.grh.hop_limit = 64;
  a.port_num = 1;
  return ibv_create_ah(pd, &a);
}

void ud_send(ibv_qp* from, ibv_ah* ah, uint32_t qpn, ibv_sge s, uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(from, &wr, &bad), 0);
}

// The next asynchronous event of `ctx` (within 5 s) is `want` about `qp`.
void expect_qp_event(ibv_context* ctx, ibv_event_type want, ibv_qp* qp) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "no " << ibv_event_type_str(want);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, want) << ibv_event_type_str(ev.event_type);
  EXPECT_EQ(ev.element.qp, qp);
  ibv_ack_async_event(&ev);
}

// Completions of `c` within `ms` milliseconds (none expected).
std::vector<ibv_wc> quiet(ibv_cq* c, int ms) {
  std::vector<ibv_wc> out;
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    ibv_wc wc[4];
    const int n = ibv_poll_cq(c, 4, wc);
    if (n > 0) out.insert(out.end(), wc, wc + n);
  }
  return out;
}

}  // namespace

// Issue 17 row 5: a UD message longer than the receive buffer (GRH
// included) is dropped and the receive stays posted for the next message,
// as rxe does (IBA class D); a receive taken from an SRQ completes
// REM_INV_REQ_ERR instead (class E).  The sender's SEND succeeds either way.
TEST_F(Verbs, UdMessageLongerThanTheReceiveIsDroppedAndTheReceiveKept) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_UD, c, c);
  ibv_cq* rc = cq();
  ibv_qp* b = qp(IBV_QPT_UD, rc, rc);
  connect(a, 0);
  connect(b, 0);
  ibv_ah* ah = ah_to_self(pd_, gid_);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ(post_recv(b, 7, 100000, 40 + 64), 0);
  for (size_t i = 0; i < 64; ++i) buf_[i] = uint8_t(0xa0 + i);
  ud_send(a, ah, b->qp_num, sge(0, 65), 1);  // one byte too many
  auto sc = poll(c, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(quiet(rc, 100).empty()) << "no completion for the dropped message";
  ud_send(a, ah, b->qp_num, sge(0, 64), 2);  // fits: the same receive takes it
  auto r = poll(rc, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 7u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(r[0].status);
  EXPECT_EQ(r[0].byte_len, 40u + 64u);
  EXPECT_EQ(std::memcmp(buf_.data() + 100000 + 40, buf_.data(), 64), 0);
  EXPECT_EQ(poll(c, 1).size(), 1u);

  // From an SRQ: the receive completes in error.
  ibv_srq_init_attr si{};
  si.attr = {8, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  ibv_qp* s = qp(IBV_QPT_UD, rc, rc, srq);
  connect(s, 0);
  ASSERT_EQ(post_srq(srq, 9, sge(200000, 40 + 16)), 0);
  ud_send(a, ah, s->qp_num, sge(0, 17), 3);
  r = poll(rc, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 9u);
  EXPECT_EQ(r[0].status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(r[0].status);
  EXPECT_EQ(poll(c, 1).size(), 1u);

  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// Issue 17 row 4: a request with an invalid rkey moves the responder's QP
// to ERR (IBA class C), completes the receive a WRITE with immediate
// consumed with the error, and raises IBV_EVENT_QP_ACCESS_ERR on the
// responder's asynchronous event queue, as a NIC does.
TEST_F(Verbs, InvalidRkeyRaisesQpAccessErrorOnTheResponder) {
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ASSERT_EQ(post_recv(b, 5, 0, 64), 0);
  std::fill(buf_.begin() + 300000, buf_.begin() + 301000, 0x11);
  ibv_sge s = sge(0, 1000);
  ibv_send_wr wr{};
  wr.wr_id = 6;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0x1234);
  wr.wr.rdma.remote_addr = addr(300000);
  wr.wr.rdma.rkey = mr_->rkey ^ 0x5a5a0000;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(sa[0].status);
  auto rb = poll(cb, 1);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].wr_id, 5u);
  EXPECT_EQ(rb[0].status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(rb[0].status);
  for (size_t i = 300000; i < 301000; ++i) ASSERT_EQ(buf_[i], 0x11) << "byte " << i;
  expect_qp_event(ctx_, IBV_EVENT_QP_ACCESS_ERR, b);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(b, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
}

// An SRQ may live in another PD than the QPs that take from it; its receive
// buffers are registered in the SRQ's PD and checked against it, as a NIC
// checks an SRQ's WQEs (issue 17 row 6: uroce checked them against the QP's
// PD, refusing good buffers and accepting others).
TEST_F(Verbs, SrqReceiveBuffersAreCheckedAgainstTheSrqsPd) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  std::vector<uint8_t> mem(65536, 0);
  ibv_mr* in_srq_pd = ibv_reg_mr(other, mem.data(), mem.size(), int(IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(in_srq_pd, nullptr);
  ibv_srq_init_attr si{};
  si.attr = {16, 1, 0};
  ibv_srq* srq = ibv_create_srq(other, &si);
  ASSERT_NE(srq, nullptr);
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb, srq);  // in pd_, taking from an SRQ of `other`
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  for (size_t i = 0; i < 3000; ++i) buf_[i] = uint8_t(i * 7 + 1);

  // A buffer of the SRQ's PD takes the message.
  ASSERT_EQ(post_srq(srq, 1, {uintptr_t(mem.data()) + 100, 3000, in_srq_pd->lkey}), 0);
  send(a, sge(0, 3000), 11);
  auto sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sa[0].status);
  auto rb = poll(cb, 1);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].wr_id, 1u);
  EXPECT_EQ(rb[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(rb[0].status);
  EXPECT_EQ(rb[0].byte_len, 3000u);
  EXPECT_EQ(std::memcmp(mem.data() + 100, buf_.data(), 3000), 0);
  EXPECT_EQ(mem[99], 0);
  EXPECT_EQ(mem[3100], 0);

  // A buffer of the QP's PD, not the SRQ's, is a protection error at the
  // receiver (its QP to ERR) and a remote operational error at the sender;
  // not a byte lands in it.
  std::fill(buf_.begin() + 500000, buf_.begin() + 510000, 0xee);
  ASSERT_EQ(post_srq(srq, 2, sge(500000, 10000)), 0);
  send(a, sge(0, 2000), 12);
  sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].status, IBV_WC_REM_OP_ERR) << ibv_wc_status_str(sa[0].status);
  rb = poll(cb, 1);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].wr_id, 2u);
  EXPECT_EQ(rb[0].status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(rb[0].status);
  for (size_t i = 500000; i < 510000; ++i) ASSERT_EQ(buf_[i], 0xee) << "byte " << i;
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(b, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  // A local access violation, then (a QP with an SRQ entering ERR) its
  // last WQE reached.
  expect_qp_event(ctx_, IBV_EVENT_QP_ACCESS_ERR, b);
  expect_qp_event(ctx_, IBV_EVENT_QP_LAST_WQE_REACHED, b);

  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dereg_mr(in_srq_pd), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

// Issue 17 row 2: what a UD QP cannot execute is posted (ibv_post_send
// returns 0) and completes in error when the requester reaches it, as on
// rxe: RDMA WRITE/READ and atomics, or an address handle of another PD,
// complete LOC_QP_OP_ERR and move the QP to ERR; a SEND above the port MTU
// leaves no packet and completes successfully (IBA C10-93.1.1).
TEST_F(Verbs, UdWorkRequestsTheQpCannotExecuteCompleteInError) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  ibv_ah* ah = ah_to_self(pd_, gid_);
  ibv_ah* foreign_ah = ah_to_self(other, gid_);
  ASSERT_NE(ah, nullptr);
  ASSERT_NE(foreign_ah, nullptr);
  ibv_cq* rc = cq();
  ibv_qp* b = qp(IBV_QPT_UD, rc, rc);
  connect(b, 0);
  ASSERT_EQ(post_recv(b, 70, 600000, 40 + 8192), 0);
  const ibv_wr_opcode kOps[] = {IBV_WR_RDMA_WRITE,           IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
                                IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP,  IBV_WR_SEND};
  for (ibv_wr_opcode op : kOps) {
    SCOPED_TRACE(op);
    ibv_cq* c = cq();
    ibv_qp* a = qp(IBV_QPT_UD, c, c);
    connect(a, 0);
    ibv_sge s = sge(0, 8);
    ibv_send_wr wr[2]{};
    for (int i = 0; i < 2; ++i) {
      wr[i].wr_id = uint64_t(i + 1);
      wr[i].sg_list = &s;
      wr[i].num_sge = 1;
      wr[i].opcode = IBV_WR_SEND;
      wr[i].send_flags = IBV_SEND_SIGNALED;
      wr[i].wr.ud.ah = ah;
      wr[i].wr.ud.remote_qpn = b->qp_num;
      wr[i].wr.ud.remote_qkey = 0x11111111;
    }
    wr[0].opcode = op;
    if (op == IBV_WR_SEND) wr[0].wr.ud.ah = foreign_ah;  // the AH of another PD
    wr[0].next = &wr[1];
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a, wr, &bad), 0);
    auto sc = poll(c, 2);
    ASSERT_EQ(sc.size(), 2u);
    EXPECT_EQ(sc[0].wr_id, 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_LOC_QP_OP_ERR) << ibv_wc_status_str(sc[0].status);
    EXPECT_EQ(sc[1].wr_id, 2u);
    EXPECT_EQ(sc[1].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(sc[1].status);
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  }
  EXPECT_TRUE(quiet(rc, 50).empty()) << "nothing reached the receiver";

  // Above the MTU: nothing sent, no error; the QP goes on.
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  const uint32_t mtu = 128u << pa.active_mtu;
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_UD, c, c);
  connect(a, 0);
  for (size_t i = 0; i < mtu + 1; ++i) buf_[i] = uint8_t(i * 13);
  ud_send(a, ah, b->qp_num, sge(0, mtu + 1), 5);
  auto sc = poll(c, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 5u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc[0].status);
  EXPECT_TRUE(quiet(rc, 100).empty()) << "no packet for a message above the MTU";
  ud_send(a, ah, b->qp_num, sge(0, mtu), 6);
  auto r = poll(rc, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 70u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(r[0].status);
  EXPECT_EQ(r[0].byte_len, 40 + mtu);
  EXPECT_EQ(std::memcmp(buf_.data() + 600000 + 40, buf_.data(), mtu), 0);
  EXPECT_EQ(poll(c, 1).size(), 1u);

  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_ah(foreign_ah), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

// Issue 17 row 3: a READ's or an atomic's local key is checked when the
// response lands, as on a NIC, not at post: the remote side's verdict comes
// first (a bad rkey REM_ACCESS_ERR, a misaligned atomic REM_INV_REQ_ERR),
// and an atomic with a good rkey executes at the peer before its bad local
// buffer fails it with LOC_PROT_ERR.
TEST_F(Verbs, ReadAndAtomicLocalKeysAreCheckedWhenTheResponseLands) {
  struct Case {
    ibv_wr_opcode op;
    bool good_rkey;
    uint64_t offset;  // into the peer's region
    ibv_wc_status want;
    bool peer_changes;
  };
  const Case cases[] = {
      {IBV_WR_RDMA_READ, false, 400000, IBV_WC_REM_ACCESS_ERR, false},
      {IBV_WR_RDMA_READ, true, 400000, IBV_WC_LOC_PROT_ERR, false},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, false, 400000, IBV_WC_REM_ACCESS_ERR, false},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, true, 400000, IBV_WC_LOC_PROT_ERR, true},
      {IBV_WR_ATOMIC_CMP_AND_SWP, true, 400000, IBV_WC_LOC_PROT_ERR, true},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, true, 400004, IBV_WC_REM_INV_REQ_ERR, false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::to_string(k.op) + (k.good_rkey ? " good rkey" : " bad rkey") + " offset " +
                 std::to_string(k.offset));
    ibv_cq* ca = cq();
    ibv_cq* cb = cq();
    ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
    ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
    connect(a, b->qp_num);
    connect(b, a->qp_num);
    const uint64_t start = 0x0102030405060708;
    std::memcpy(buf_.data() + 400000, &start, 8);
    std::memcpy(buf_.data() + 400008, &start, 8);
    std::fill(buf_.begin(), buf_.begin() + 64, 0x3c);
    ibv_sge s = sge(0, k.op == IBV_WR_RDMA_READ ? 64 : 8);
    s.lkey = mr_->lkey ^ 0x00400000;
    ibv_send_wr wr{};
    wr.wr_id = 21;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = k.op;
    wr.send_flags = IBV_SEND_SIGNALED;
    const uint32_t rkey = k.good_rkey ? mr_->rkey : mr_->rkey ^ 0x00400000;
    if (k.op == IBV_WR_RDMA_READ) {
      wr.wr.rdma.remote_addr = addr(k.offset);
      wr.wr.rdma.rkey = rkey;
    } else {
      wr.wr.atomic.remote_addr = addr(k.offset);
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = k.op == IBV_WR_ATOMIC_CMP_AND_SWP ? start : 5;
      wr.wr.atomic.swap = 0x1111111111111111;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    auto sa = poll(ca, 1);
    ASSERT_EQ(sa.size(), 1u);
    EXPECT_EQ(sa[0].wr_id, 21u);
    EXPECT_EQ(sa[0].status, k.want) << ibv_wc_status_str(sa[0].status);
    uint64_t now = 0;
    std::memcpy(&now, buf_.data() + 400000, 8);
    const uint64_t changed = k.op == IBV_WR_ATOMIC_CMP_AND_SWP ? 0x1111111111111111 : start + 5;
    EXPECT_EQ(now, k.peer_changes ? changed : start);
    std::memcpy(&now, buf_.data() + 400008, 8);
    EXPECT_EQ(now, start);
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(buf_[i], 0x3c) << "local byte " << i;
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
    ASSERT_EQ(ibv_query_qp(b, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, k.want == IBV_WC_LOC_PROT_ERR ? IBV_QPS_RTS : IBV_QPS_ERR);
    if (k.want == IBV_WC_REM_ACCESS_ERR) expect_qp_event(ctx_, IBV_EVENT_QP_ACCESS_ERR, b);
    if (k.want == IBV_WC_REM_INV_REQ_ERR) expect_qp_event(ctx_, IBV_EVENT_QP_REQ_ERR, b);
  }
}

}  // namespace compat_test
