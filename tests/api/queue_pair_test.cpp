// uroce::QueuePair: connect() and every RC operation, byte-exact, and the
// errors of misuse.
#include <arpa/inet.h>

#include <thread>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

void post_recv(Side& s, uint64_t wr_id, size_t off, uint32_t len) {
  Sge sge = s.sge(off, len);
  must(s.qp->post_recv(RecvWr{wr_id, {&sge, 1}}), "post_recv");
}

TEST(QueuePair, LocalInfoDescribesTheQp) {
  Pair p(PairOptions{.connect = false});
  const PeerInfo i = p.a.qp->local_info();
  EXPECT_EQ(i.gid, ip("127.0.0.1"));
  EXPECT_EQ(i.qpn, p.a.qp->qpn());
  EXPECT_LT(i.psn, 1u << 24);
  EXPECT_EQ(i.mtu, 4096u);
  EXPECT_EQ(p.a.qp->local_info().psn, i.psn);  // chosen once
}

TEST(QueuePair, ConnectWalksToRtsWithTheAttributesRcNeeds) {
  Pair p;
  const QpAttr a = p.a.qp->query();
  EXPECT_EQ(a.qp_state, QpState::rts);
  EXPECT_EQ(a.dest_qp_num, p.b.qp->qpn());
  EXPECT_EQ(a.ah_attr.dgid, ip("127.0.0.2"));
  EXPECT_EQ(a.sq_psn, p.a.qp->local_info().psn);
  EXPECT_EQ(a.rq_psn, p.b.qp->local_info().psn);
  EXPECT_EQ(a.path_mtu, Mtu::m4096);
  EXPECT_EQ(a.timeout, 14);
  EXPECT_EQ(a.retry_cnt, 7);
  EXPECT_EQ(a.rnr_retry, 7);
  EXPECT_EQ(a.max_rd_atomic, 16);
  EXPECT_EQ(a.max_dest_rd_atomic, 16);
  EXPECT_EQ(a.qp_access_flags, access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
}

TEST(QueuePair, SendDeliversBytesAndBothCompletions) {
  Pair p(PairOptions{.path_mtu = Mtu::m1024});
  fill(std::span<std::byte>(p.a.buf).first(10000), 1);  // 10 packets
  post_recv(p.b, 77, 0, 16384);
  Sge s = p.a.sge(0, 10000);
  SendWr wr;
  wr.wr_id = 42;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  must(p.a.qp->post_send(wr), "post_send");
  const Wc r = wait_wc(*p.b.rcq);
  EXPECT_EQ(r.status, WcStatus::success) << to_string(r.status);
  EXPECT_EQ(r.wr_id, 77u);
  EXPECT_EQ(r.opcode, WcOpcode::recv);
  EXPECT_EQ(r.byte_len, 10000u);
  EXPECT_EQ(r.qp_num, p.b.qp->qpn());
  EXPECT_EQ(r.src_qp, p.a.qp->qpn());
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 10000), 0);
  EXPECT_EQ(p.b.buf[10000], std::byte{0});
  const Wc c = wait_wc(*p.a.scq);
  EXPECT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_EQ(c.opcode, WcOpcode::send);
  EXPECT_EQ(c.byte_len, 10000u);
}

TEST(QueuePair, SendWithImmediateAndInline) {
  Pair p;
  post_recv(p.b, 1, 0, 64);
  const char msg[] = "inline hello";
  Sge s{uint64_t(reinterpret_cast<uintptr_t>(msg)), sizeof msg, 0};  // inline: no key needed
  SendWr wr;
  wr.opcode = WrOpcode::send_with_imm;
  wr.imm_data = htonl(0xdeadbeef);
  wr.send_flags = send_flags::kSignaled | send_flags::kInline;
  wr.sg_list = {&s, 1};
  must(p.a.qp->post_send(wr), "post_send");
  const Wc r = wait_wc(*p.b.rcq);
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.byte_len, sizeof msg);
  EXPECT_EQ(r.wc_flags & wc_flags::kWithImm, wc_flags::kWithImm);
  EXPECT_EQ(ntohl(r.imm_data), 0xdeadbeefu);
  EXPECT_EQ(std::memcmp(p.b.at(0), msg, sizeof msg), 0);
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
}

TEST(QueuePair, RdmaWriteLandsByteExactWithoutPeerCompletion) {
  Pair p(PairOptions{.path_mtu = Mtu::m1024});
  fill(std::span<std::byte>(p.a.buf).first(70000), 2);
  Sge s = p.a.sge(0, 70000);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(1000), p.b.mr->rkey(), 5)), "post");
  const Wc c = wait_wc(*p.a.scq);
  EXPECT_EQ(c.status, WcStatus::success) << to_string(c.status);
  EXPECT_EQ(c.opcode, WcOpcode::rdma_write);
  EXPECT_EQ(c.byte_len, 70000u);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(1000), 70000), 0);
  EXPECT_EQ(p.b.buf[999], std::byte{0});
  EXPECT_EQ(p.b.buf[71000], std::byte{0});
  EXPECT_TRUE(drain(*p.b.rcq, 20ms).empty());
}

TEST(QueuePair, RdmaReadFetchesByteExactAcrossManySegments) {
  Pair p(PairOptions{.path_mtu = Mtu::m1024});
  // 600 KB at 1 KiB per packet: far more than one READ window of responses.
  const size_t n = 600000;
  fill(std::span<std::byte>(p.b.buf).first(n), 3);
  Sge s = p.a.sge(100, uint32_t(n));
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_read, s, p.b.addr(), p.b.mr->rkey(), 6)), "post");
  const Wc c = wait_wc(*p.a.scq);
  EXPECT_EQ(c.status, WcStatus::success) << to_string(c.status);
  EXPECT_EQ(c.opcode, WcOpcode::rdma_read);
  EXPECT_EQ(c.byte_len, n);
  EXPECT_EQ(std::memcmp(p.a.at(100), p.b.at(0), n), 0);
  EXPECT_EQ(p.a.buf[99], std::byte{0});
  EXPECT_EQ(p.a.buf[100 + n], std::byte{0});
}

TEST(QueuePair, FetchAndAddReturnsTheOldValue) {
  Pair p;
  uint64_t counter = 1000;
  std::memcpy(p.b.at(64), &counter, 8);
  Sge s = p.a.sge(0, 8);
  for (uint64_t i = 0; i < 3; ++i) {
    SendWr wr = rdma(WrOpcode::atomic_fetch_and_add, s, p.b.addr(64), p.b.mr->rkey(), i);
    wr.compare_add = 7;
    must(p.a.qp->post_send(wr), "post");
    const Wc c = wait_wc(*p.a.scq);
    EXPECT_EQ(c.status, WcStatus::success) << to_string(c.status);
    EXPECT_EQ(c.opcode, WcOpcode::fetch_add);
    EXPECT_EQ(c.byte_len, 8u);
    uint64_t old;
    std::memcpy(&old, p.a.at(0), 8);
    EXPECT_EQ(old, 1000 + 7 * i);
  }
  std::memcpy(&counter, p.b.at(64), 8);
  EXPECT_EQ(counter, 1021u);
}

TEST(QueuePair, CompareAndSwapSwapsOnlyOnAMatch) {
  Pair p;
  uint64_t v = 5;
  std::memcpy(p.b.at(8), &v, 8);
  Sge s = p.a.sge(0, 8);
  SendWr miss = rdma(WrOpcode::atomic_cmp_and_swp, s, p.b.addr(8), p.b.mr->rkey());
  miss.compare_add = 6;
  miss.swap = 99;
  must(p.a.qp->post_send(miss), "miss");
  EXPECT_EQ(wait_wc(*p.a.scq).opcode, WcOpcode::comp_swap);
  uint64_t old, now;
  std::memcpy(&old, p.a.at(0), 8);
  std::memcpy(&now, p.b.at(8), 8);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(now, 5u);
  SendWr hit = miss;
  hit.compare_add = 5;
  must(p.a.qp->post_send(hit), "hit");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  std::memcpy(&old, p.a.at(0), 8);
  std::memcpy(&now, p.b.at(8), 8);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(now, 99u);
}

TEST(QueuePair, MisalignedAtomicIsAnInvalidRequest) {
  Pair p;
  Sge s = p.a.sge(0, 8);
  SendWr wr = rdma(WrOpcode::atomic_fetch_and_add, s, p.b.addr(3), p.b.mr->rkey());
  must(p.a.qp->post_send(wr), "post");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::rem_inv_req_err);
}

TEST(QueuePair, PostBeforeConnectIsEinval) {
  Pair p(PairOptions{.connect = false});
  Sge s = p.a.sge(0, 8);
  Status st = p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey()));
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("RESET"), std::string_view::npos) << st.to_string();
  st = p.a.qp->post_recv(RecvWr{1, {&s, 1}});
  EXPECT_EQ(st.code(), EINVAL);
}

TEST(QueuePair, ConnectTwiceIsEinval) {
  Pair p;
  Status st = p.a.qp->connect(p.b.qp->local_info());
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("RTS"), std::string_view::npos) << st.to_string();
  EXPECT_EQ(p.a.qp->state(), QpState::rts);  // untouched
}

TEST(QueuePair, FailedConnectNamesTheStepAndLeavesReset) {
  PairOptions o;
  o.mtu_a = 1024;  // A's port cannot carry 4096-byte packets
  o.connect = false;
  Pair p(o);
  ConnectOptions c;
  c.mtu = Mtu::m4096;
  Status st = p.a.qp->connect(p.b.qp->local_info(), c);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("INIT->RTR"), std::string_view::npos) << st.to_string();
  EXPECT_NE(st.message().find("path_mtu"), std::string_view::npos) << st.to_string();
  EXPECT_EQ(p.a.qp->state(), QpState::reset);
  // Without the impossible option it goes through.
  must(p.a.qp->connect(p.b.qp->local_info()), "connect");
  EXPECT_EQ(p.a.qp->state(), QpState::rts);
}

TEST(QueuePair, ConnectRefusesAnEmptyPeer) {
  Pair p(PairOptions{.connect = false});
  Status st = p.a.qp->connect(PeerInfo{});
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_EQ(p.a.qp->state(), QpState::reset);
}

TEST(QueuePair, PathMtuIsTheSmallerOfBothPorts) {
  PairOptions o;
  o.mtu_a = 1024;
  Pair p(o);  // B's port says 4096, A's 1024
  EXPECT_EQ(p.a.qp->query().path_mtu, Mtu::m1024);
  EXPECT_EQ(p.b.qp->query().path_mtu, Mtu::m1024);
  fill(std::span<std::byte>(p.b.buf).first(9000), 4);
  Sge s = p.a.sge(0, 9000);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_read, s, p.b.addr(), p.b.mr->rkey())), "read");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 9000), 0);
}

TEST(QueuePair, RnrWaitsForTheReceiveBuffer) {
  Pair p;
  Sge s = p.a.sge(0, 100);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  must(p.a.qp->post_send(wr), "post_send");  // B has no receive posted yet
  std::this_thread::sleep_for(10ms);
  post_recv(p.b, 3, 0, 128);
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 3u);
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_GE(must(p.a.ctx->counter("req_rnr_naks_rcvd"), "rnr naks"), 1u);
}

void send_too_big(Pair& p) {
  Sge r = p.b.sge(0, 16);
  must(p.b.qp->post_recv(RecvWr{1, {&r, 1}}), "post_recv");
  Sge s = p.a.sge(0, 100);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  must(p.a.qp->post_send(wr), "post_send");
}

TEST(QueuePair, ReceiveTooSmallIsALocalLengthError) {
  Pair p;
  send_too_big(p);
  EXPECT_EQ(wait_wc(*p.b.rcq).status, WcStatus::loc_len_err);
  EXPECT_EQ(p.b.qp->state(), QpState::err);
}

// IBA 9.7.5.2.2: the responder NAKs (invalid request) as its QP enters ERR,
// so the requester completes with REM_INV_REQ_ERR at once (not after
// retry_cnt timeouts).
TEST(QueuePair, ReceiveTooSmallIsNakedToTheRequester) {
  Pair p;
  send_too_big(p);
  EXPECT_EQ(wait_wc(*p.b.rcq).status, WcStatus::loc_len_err);
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::rem_inv_req_err);
}

TEST(QueuePair, QueueLimitsAreEnforced) {
  Pair p;
  Sge sges[5];
  for (int i = 0; i < 5; ++i) sges[i] = p.b.sge(size_t(i) * 8, 8);
  size_t bad = 99;
  RecvWr wide{1, {sges, 5}};  // max_recv_sge is 4
  Status st = p.b.qp->post_recv(std::span<const RecvWr>(&wide, 1), &bad);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_EQ(bad, 0u);
  EXPECT_NE(st.message().find("max_recv_sge"), std::string_view::npos);

  std::vector<RecvWr> many(p.b.qp->cap().max_recv_wr + 1, RecvWr{2, {sges, 1}});
  st = p.b.qp->post_recv(many, &bad);
  EXPECT_EQ(st.code(), ENOMEM);
  EXPECT_EQ(bad, p.b.qp->cap().max_recv_wr);
}

TEST(QueuePair, UnreliableConnectionWritesAndSends) {
  Pair p(PairOptions{.type = QpType::uc});
  fill(std::span<std::byte>(p.a.buf).first(5000), 5);
  Sge s = p.a.sge(0, 5000);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(8192), p.b.mr->rkey())), "write");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  post_recv(p.b, 4, 0, 8192);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.sg_list = {&s, 1};
  must(p.a.qp->post_send(wr), "send");
  EXPECT_EQ(wait_wc(*p.b.rcq).byte_len, 5000u);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 5000), 0);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(8192), 5000), 0);
  // READ needs RC: posted, it completes LOC_QP_OP_ERR (as on a NIC).
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_read, s, p.b.addr(), p.b.mr->rkey())), "read");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::loc_qp_op_err);
}

TEST(QueuePair, MovedQpKeepsWorking) {
  Pair p;
  QueuePair moved = std::move(*p.a.qp);
  Sge s = p.a.sge(0, 8);
  must(moved.post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey())), "post");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
}

TEST(QueuePair, ResetThenConnectAgain) {
  Pair p;
  QpAttr r;
  r.qp_state = QpState::reset;
  must(p.a.qp->modify(r, qp_attr_mask::kState), "to RESET");
  must(p.b.qp->modify(r, qp_attr_mask::kState), "to RESET");
  p.connect();
  fill(std::span<std::byte>(p.a.buf).first(64), 9);
  Sge s = p.a.sge(0, 64);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey())), "post");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 64), 0);
}

}  // namespace
}  // namespace uroce::apitest
