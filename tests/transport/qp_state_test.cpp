// The QP state machine: every legal transition of RC, UC and UD with its
// required attributes; missing or extra attributes and illegal transitions
// fail with EINVAL and say why; ERR flushes everything posted; query
// returns what was set.
#include "fake_wire.hpp"
#include "verbs/qp_state_table.hpp"

namespace uroce::test {
namespace {

namespace m = qp_attr_mask;
using S = QpState;

struct Machine {
  Pair p;
  explicit Machine(QpType t, uint32_t device_mtu = 0) : p(opts(t, device_mtu)) {}
  static PairOptions opts(QpType t, uint32_t device_mtu) {
    PairOptions o;
    o.type = t;
    o.connect = false;
    o.device_mtu = device_mtu;
    return o;
  }
  Qp& qp() { return *p.a.qp; }
  // Every attribute set to a valid value.
  QpAttr attrs(S next) const {
    QpAttr a;
    a.qp_state = next;
    a.qkey = 0x1234;
    a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead;
    a.path_mtu = Mtu::m2048;
    a.dest_qp_num = p.b.qp->qpn();
    a.rq_psn = 0x123456;
    a.sq_psn = 0x654321;
    a.ah_attr.dgid = p.b.gid();
    a.max_dest_rd_atomic = 8;
    a.max_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.timeout = 17;
    a.retry_cnt = 5;
    a.rnr_retry = 3;
    return a;
  }
  Status go(S next, uint32_t mask) { return qp().modify(attrs(next), mask | m::kState); }
};

struct Step {
  S from, to;
  uint32_t req_ud, req_uc, req_rc;
};
const Step kPath[] = {
    {S::reset, S::init, m::kPkeyIndex | m::kPort | m::kQkey, m::kPkeyIndex | m::kPort | m::kAccessFlags,
     m::kPkeyIndex | m::kPort | m::kAccessFlags},
    {S::init, S::init, 0, 0, 0},
    {S::init, S::rtr, 0, m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn,
     m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic | m::kMinRnrTimer},
    {S::rtr, S::rts, m::kSqPsn, m::kSqPsn, m::kSqPsn | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic},
    {S::rts, S::rts, 0, 0, 0},
    {S::rts, S::sqd, 0, 0, 0},
    {S::sqd, S::sqd, 0, 0, 0},
    {S::sqd, S::rts, 0, 0, 0},
    {S::rts, S::err, 0, 0, 0},
    {S::err, S::err, 0, 0, 0},
    {S::err, S::reset, 0, 0, 0},
};

uint32_t required(const Step& s, QpType t) {
  return t == QpType::ud ? s.req_ud : t == QpType::uc ? s.req_uc : s.req_rc;
}

class QpStates : public ::testing::TestWithParam<QpType> {};

TEST_P(QpStates, EveryLegalTransitionWithItsRequiredAttributes) {
  const QpType t = GetParam();
  Machine mc(t);
  for (const Step& st : kPath) {
    SCOPED_TRACE(std::string(to_string(st.from)) + "->" + to_string(st.to));
    ASSERT_EQ(mc.qp().query().qp_state, st.from);
    const uint32_t req = required(st, t);
    // Each required attribute left out: refused, named, nothing changes.
    for (uint32_t bit = 1; bit && bit <= req; bit <<= 1) {
      if (!(req & bit)) continue;
      Status s = mc.go(st.to, req & ~bit);
      EXPECT_EQ(s.code(), EINVAL) << qp_attr_mask_names(bit);
      EXPECT_NE(s.message().find(qp_attr_mask_names(bit)), std::string_view::npos) << s.to_string();
      EXPECT_EQ(mc.qp().query().qp_state, st.from);
    }
    // An attribute this transition does not take: refused and named.
    const uint32_t extra = st.to == S::reset || st.to == S::err ? m::kSqPsn : m::kRateLimit;
    Status s = mc.go(st.to, req | extra);
    EXPECT_EQ(s.code(), EINVAL);
    EXPECT_NE(s.message().find(qp_attr_mask_names(extra)), std::string_view::npos) << s.to_string();
    s = mc.go(st.to, req);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(mc.qp().query().qp_state, st.to);
  }
}

TEST_P(QpStates, IllegalTransitionsFail) {
  const QpType t = GetParam();
  Machine mc(t);
  auto refused = [&](S to) {
    const S from = mc.qp().query().qp_state;
    Status s = mc.go(to, 0);
    EXPECT_EQ(s.code(), EINVAL) << to_string(from) << "->" << to_string(to);
    EXPECT_NE(s.message().find(std::string("no transition from ") + to_string(from)), std::string_view::npos)
        << s.to_string();
    EXPECT_EQ(mc.qp().query().qp_state, from);
  };
  for (S to : {S::rtr, S::rts, S::sqd, S::sqe}) refused(to);  // from RESET
  ASSERT_TRUE(mc.go(S::init, required(kPath[0], t)).ok());
  for (S to : {S::rts, S::sqd, S::sqe}) refused(to);  // from INIT
  ASSERT_TRUE(mc.go(S::rtr, required(kPath[2], t)).ok());
  for (S to : {S::init, S::rtr, S::sqd, S::sqe}) refused(to);  // from RTR
  ASSERT_TRUE(mc.go(S::rts, required(kPath[3], t)).ok());
  for (S to : {S::init, S::rtr}) refused(to);  // from RTS
  ASSERT_TRUE(mc.go(S::err, 0).ok());
  for (S to : {S::init, S::rtr, S::rts, S::sqd}) refused(to);  // from ERR
  // cur_qp_state must match when given.
  QpAttr a = mc.attrs(S::reset);
  a.cur_qp_state = S::rts;
  EXPECT_EQ(mc.qp().modify(a, m::kState | m::kCurState).code(), EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Types, QpStates, ::testing::Values(QpType::rc, QpType::uc, QpType::ud),
                         [](const ::testing::TestParamInfo<QpType>& i) { return to_string(i.param); });

TEST(QpState, BadAttributeValuesAreRefused) {
  Machine mc(QpType::rc, 1024);  // a port whose active MTU is 1024
  const uint32_t init = m::kPkeyIndex | m::kPort | m::kAccessFlags;
  QpAttr a = mc.attrs(S::init);
  a.pkey_index = 1;
  EXPECT_EQ(mc.qp().modify(a, init | m::kState).code(), EINVAL);
  a = mc.attrs(S::init);
  a.port_num = 2;
  EXPECT_EQ(mc.qp().modify(a, init | m::kState).code(), EINVAL);
  ASSERT_TRUE(mc.go(S::init, init).ok());
  const uint32_t rtr = required(kPath[2], QpType::rc);
  auto bad_rtr = [&](auto change, const char* what) {
    QpAttr b = mc.attrs(S::rtr);
    b.path_mtu = Mtu::m1024;
    change(b);
    Status s = mc.qp().modify(b, rtr | m::kState);
    EXPECT_EQ(s.code(), EINVAL) << what;
    EXPECT_EQ(mc.qp().query().qp_state, S::init) << what;
    return std::string(s.message());
  };
  const std::string msg = bad_rtr([](QpAttr& b) { b.path_mtu = Mtu::m2048; }, "path_mtu above the port");
  EXPECT_NE(msg.find("active MTU"), std::string::npos) << msg;
  bad_rtr([](QpAttr& b) { b.path_mtu = Mtu(0); }, "path_mtu 0");
  bad_rtr([](QpAttr& b) { b.path_mtu = Mtu(6); }, "path_mtu 6");
  bad_rtr([](QpAttr& b) { b.min_rnr_timer = 32; }, "min_rnr_timer");
  bad_rtr([](QpAttr& b) { b.max_dest_rd_atomic = 129; }, "max_dest_rd_atomic");
  bad_rtr([](QpAttr& b) { b.dest_qp_num = 1u << 24; }, "dest_qp_num");
  bad_rtr([](QpAttr& b) { b.ah_attr.dgid = *IpAddr::parse("::1"); }, "IPv6 GID on an IPv4 port");
  bad_rtr([](QpAttr& b) { b.ah_attr.is_global = false; }, "no GRH");
  QpAttr ok = mc.attrs(S::rtr);
  ok.path_mtu = Mtu::m1024;
  ASSERT_TRUE(mc.qp().modify(ok, rtr | m::kState).ok());
  const uint32_t rts = required(kPath[3], QpType::rc);
  for (auto change : {+[](QpAttr& b) { b.timeout = 32; }, +[](QpAttr& b) { b.retry_cnt = 8; },
                      +[](QpAttr& b) { b.rnr_retry = 8; }, +[](QpAttr& b) { b.max_rd_atomic = 129; }}) {
    QpAttr b = mc.attrs(S::rts);
    change(b);
    EXPECT_EQ(mc.qp().modify(b, rts | m::kState).code(), EINVAL);
  }
  EXPECT_EQ(mc.qp().query().qp_state, S::rtr);
}

TEST(QpState, QueryReturnsWhatWasSet) {
  Machine mc(QpType::rc);
  ASSERT_TRUE(mc.go(S::init, required(kPath[0], QpType::rc)).ok());
  ASSERT_TRUE(mc.go(S::rtr, required(kPath[2], QpType::rc)).ok());
  ASSERT_TRUE(mc.go(S::rts, required(kPath[3], QpType::rc)).ok());
  const QpAttr want = mc.attrs(S::rts);
  const QpAttr got = mc.qp().query();
  EXPECT_EQ(got.qp_state, S::rts);
  EXPECT_EQ(got.cur_qp_state, S::rts);
  EXPECT_EQ(got.qp_access_flags, want.qp_access_flags);
  EXPECT_EQ(got.path_mtu, want.path_mtu);
  EXPECT_EQ(got.dest_qp_num, want.dest_qp_num);
  EXPECT_EQ(got.rq_psn, want.rq_psn);
  EXPECT_EQ(got.sq_psn, want.sq_psn);
  EXPECT_EQ(got.ah_attr.dgid, want.ah_attr.dgid);
  EXPECT_EQ(got.max_dest_rd_atomic, want.max_dest_rd_atomic);
  EXPECT_EQ(got.max_rd_atomic, want.max_rd_atomic);
  EXPECT_EQ(got.min_rnr_timer, want.min_rnr_timer);
  EXPECT_EQ(got.timeout, want.timeout);
  EXPECT_EQ(got.retry_cnt, want.retry_cnt);
  EXPECT_EQ(got.rnr_retry, want.rnr_retry);
  EXPECT_EQ(got.port_num, 1);
  EXPECT_EQ(got.pkey_index, 0);
  EXPECT_EQ(got.cap.max_send_wr, mc.p.opt.max_send_wr);
  EXPECT_EQ(got.cap.max_recv_wr, mc.p.opt.max_recv_wr);
  EXPECT_EQ(got.cap.max_send_sge, mc.p.opt.max_sge);
  EXPECT_EQ(got.cap.max_inline_data, mc.p.opt.max_inline);
  Machine ud(QpType::ud);
  ASSERT_TRUE(ud.go(S::init, required(kPath[0], QpType::ud)).ok());
  EXPECT_EQ(ud.qp().query().qkey, 0x1234u);
}

// Moving to ERR flushes every posted send (signaled or not) and receive, in
// order, with the opcode of each WR.
TEST(QpState, ErrFlushesSendsAndReceives) {
  PairOptions o;
  o.fake = net::FakeNetwork::create();
  Pair p(o);
  o.fake->set_filter([](net::FakePacket&) { return false; });  // nothing completes
  Sge s = p.a.sge(0, 100), a8 = p.a.sge(200, 8);
  const WrOpcode ops[7] = {WrOpcode::send,
                           WrOpcode::rdma_write,
                           WrOpcode::rdma_read,
                           WrOpcode::atomic_fetch_and_add,
                           WrOpcode::atomic_cmp_and_swp,
                           WrOpcode::rdma_write_with_imm,
                           WrOpcode::send_with_imm};
  const WcOpcode want[7] = {WcOpcode::send,      WcOpcode::rdma_write, WcOpcode::rdma_read, WcOpcode::fetch_add,
                            WcOpcode::comp_swap, WcOpcode::rdma_write, WcOpcode::send};
  SendWr wrs[7];
  for (int i = 0; i < 7; ++i) {
    wrs[i].wr_id = 10 + i;
    wrs[i].opcode = ops[i];
    wrs[i].send_flags = i % 2 ? 0 : send_flags::kSignaled;
    wrs[i].sg_list = {is_atomic_opcode(ops[i]) ? &a8 : &s, 1};
    wrs[i].remote_addr = p.b.addr(0);
    wrs[i].rkey = p.b.mr->rkey();
  }
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.a.qp, 50 + i, {p.a.sge(1000, 100)}).ok());
  EXPECT_TRUE(drain(*p.a.scq, 5).empty());
  QpAttr at;
  at.qp_state = S::err;
  ASSERT_TRUE(p.a.qp->modify(at, m::kState).ok());
  auto sc = poll_n(*p.a.scq, 7);
  ASSERT_EQ(sc.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(sc[i].status, WcStatus::wr_flush_err);
    EXPECT_EQ(sc[i].opcode, want[i]) << i;
    EXPECT_EQ(sc[i].qp_num, p.a.qp->qpn());
  }
  auto rc = poll_n(*p.a.rcq, 3);
  ASSERT_EQ(rc.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc[i].wr_id, uint64_t(50 + i));
    EXPECT_EQ(rc[i].status, WcStatus::wr_flush_err);
    EXPECT_EQ(rc[i].opcode, WcOpcode::recv);
  }
  // Posting in ERR completes at once with WR_FLUSH_ERR.
  ASSERT_TRUE(post_recv(*p.a.qp, 60, {p.a.sge(1000, 100)}).ok());
  rc = poll_n(*p.a.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::wr_flush_err);
  // ERR -> RESET -> ... -> RTS: the QP works again (the peer reset as well).
  o.fake->set_filter({});
  at.qp_state = S::reset;
  ASSERT_TRUE(p.a.qp->modify(at, m::kState).ok());
  ASSERT_TRUE(p.b.qp->modify(at, m::kState).ok());
  p.connect();
  ASSERT_TRUE(post_recv(*p.b.qp, 70, {p.b.sge(0, 100)}).ok());
  ASSERT_TRUE(post_send(*p.a.qp, wrs[0]).ok());
  sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
}

}  // namespace
}  // namespace uroce::test
