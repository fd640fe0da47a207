// compat.Verbs: the RC data path, the extended APIs (ibv_qp_ex, ibv_cq_ex) and UD.
#include "verbs_fixture.hpp"

namespace compat_test {

// ------------------------------------------------------------------ RC data path

TEST_F(Verbs, RcSendWriteReadAndAtomics) {
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  EXPECT_EQ(a->state, IBV_QPS_RTS);

  // SEND with immediate: a's bytes [0, 64) -> b's [4096, 4160).
  for (int i = 0; i < 64; ++i) buf_[i] = uint8_t(i + 1);
  ASSERT_EQ(post_recv(b, 7, 4096, 4096), 0);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0x1234);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto rb = poll(cb, 1);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rb[0].wr_id, 7u);
  EXPECT_EQ(rb[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rb[0].byte_len, 64u);
  EXPECT_TRUE(rb[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(rb[0].imm_data), 0x1234u);
  EXPECT_EQ(rb[0].qp_num, b->qp_num);
  EXPECT_EQ(rb[0].src_qp, a->qp_num);
  EXPECT_EQ(std::memcmp(&buf_[4096], &buf_[0], 64), 0);
  auto sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].opcode, IBV_WC_SEND);

  // RDMA WRITE of 100 KiB, then READ it back elsewhere.
  for (size_t i = 0; i < 100 * 1024; ++i) buf_[8192 + i] = uint8_t(i * 7);
  s = sge(8192, 100 * 1024);
  wr = {};
  wr.wr_id = 2;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr(300 * 1024);
  wr.wr.rdma.rkey = mr_->rkey;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sa[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(&buf_[300 * 1024], &buf_[8192], 100 * 1024), 0);
  s = sge(500 * 1024, 100 * 1024);
  wr.wr_id = 3;
  wr.opcode = IBV_WR_RDMA_READ;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sa[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(sa[0].byte_len, 100u * 1024);
  EXPECT_EQ(std::memcmp(&buf_[500 * 1024], &buf_[8192], 100 * 1024), 0);

  // Atomics on a word of b's region; the old value lands in a's buffer.
  uint64_t word = 40;
  std::memcpy(&buf_[700 * 1024], &word, 8);
  s = sge(704 * 1024, 8);
  wr = {};
  wr.wr_id = 4;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = addr(700 * 1024);
  wr.wr.atomic.rkey = mr_->rkey;
  wr.wr.atomic.compare_add = 2;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].opcode, IBV_WC_FETCH_ADD);
  std::memcpy(&word, &buf_[704 * 1024], 8);
  EXPECT_EQ(word, 40u);
  wr.wr_id = 5;
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 99;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  sa = poll(ca, 1);
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&word, &buf_[700 * 1024], 8);
  EXPECT_EQ(word, 99u);
}

TEST_F(Verbs, BadWrIsTheFirstNotPostedAndLongChainsArePosted) {
  ibv_cq* c = cq(512);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  connect(a, a->qp_num);  // a QP connected to itself
  ibv_sge s = sge(0, 8);
  ibv_sge three[3] = {sge(0, 8), sge(8, 8), sge(16, 8)};
  ibv_send_wr w[3]{};
  for (int i = 0; i < 3; ++i) {
    w[i].wr_id = uint64_t(i);
    w[i].sg_list = &s;
    w[i].num_sge = 1;
    w[i].opcode = IBV_WR_RDMA_WRITE;
    w[i].send_flags = IBV_SEND_SIGNALED;
    w[i].wr.rdma.remote_addr = addr(4096);
    w[i].wr.rdma.rkey = mr_->rkey;
    if (i < 2) w[i].next = &w[i + 1];
  }
  w[1].sg_list = three;
  w[1].num_sge = 3;  // the QP has max_send_sge 2
  ibv_send_wr* bad = nullptr;
  errno = 0;
  EXPECT_EQ(ibv_post_send(a, &w[0], &bad), EINVAL);
  EXPECT_EQ(bad, &w[1]);
  auto wc = poll(c, 1);  // w[0] was posted
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 0u);

  // A chain longer than the post path's stack batch (16).
  std::vector<ibv_send_wr> chain(40);
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i] = w[0];
    chain[i].wr_id = 100 + i;
    chain[i].next = i + 1 < chain.size() ? &chain[i + 1] : nullptr;
  }
  ASSERT_EQ(ibv_post_send(a, chain.data(), &bad), 0);
  wc = poll(c, chain.size());
  ASSERT_EQ(wc.size(), chain.size());
  for (size_t i = 0; i < wc.size(); ++i) {
    EXPECT_EQ(wc[i].wr_id, 100 + i);
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
}

TEST_F(Verbs, LidOnlyAddressVectorIsRoutedByPortLid) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  connect(a, b->qp_num, /*lid_only=*/true);
  connect(b, a->qp_num, /*lid_only=*/true);
  ASSERT_EQ(post_recv(b, 9, 4096, 64), 0);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto wc = poll(c, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ibv_qp_attr qa;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_CAP, &ia), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(qa.dest_qp_num, b->qp_num);
  EXPECT_EQ(qa.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(std::memcmp(qa.ah_attr.grh.dgid.raw, gid_.raw, 16), 0);
  EXPECT_EQ(ia.send_cq, c);
  EXPECT_GE(ia.cap.max_send_wr, 64u);
}

// ------------------------------------------------------------------ extended APIs

TEST_F(Verbs, QpExWorkRequestApi) {
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp_init_attr_ex x{};
  x.send_cq = x.recv_cq = ca;
  x.qp_type = IBV_QPT_RC;
  x.cap = {64, 64, 2, 2, 64};
  x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  x.pd = pd_;
  x.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
                     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  ibv_qp* a = ibv_create_qp_ex(ctx_, &x);
  ASSERT_NE(a, nullptr) << std::strerror(errno);
  qps_.push_back(a);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(a);
  ASSERT_NE(qx, nullptr);
  ASSERT_EQ(post_recv(b, 20, 64 * 1024, 1024), 0);
  ASSERT_EQ(post_recv(b, 21, 65 * 1024, 1024), 0);

  for (int i = 0; i < 32; ++i) buf_[i] = uint8_t(0xa0 + i);
  char inl[16] = "inline payload";
  uint64_t word = 5;
  std::memcpy(&buf_[128 * 1024], &word, 8);
  ibv_sge list[2] = {sge(0, 16), sge(16, 16)};
  ibv_wr_start(qx);
  qx->wr_id = 1;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, mr_->lkey, addr(0), 32);
  qx->wr_id = 2;
  ibv_wr_send_imm(qx, htonl(77));
  ibv_wr_set_inline_data(qx, inl, sizeof inl);
  std::memset(inl, 0, sizeof inl);  // copied by the setter: reusable at once
  qx->wr_id = 3;
  ibv_wr_rdma_write(qx, mr_->rkey, addr(96 * 1024));
  ibv_wr_set_sge_list(qx, 2, list);
  qx->wr_id = 4;
  ibv_wr_atomic_fetch_add(qx, mr_->rkey, addr(128 * 1024), 10);
  ibv_wr_set_sge(qx, mr_->lkey, addr(132 * 1024), 8);
  ASSERT_EQ(ibv_wr_complete(qx), 0);

  auto wa = poll(ca, 4);
  ASSERT_EQ(wa.size(), 4u);
  const ibv_wc_opcode ops[4] = {IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_FETCH_ADD};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wa[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(wa[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wa[i].opcode, ops[i]);
  }
  auto wb = poll(cb, 2);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].byte_len, 32u);
  EXPECT_EQ(std::memcmp(&buf_[64 * 1024], &buf_[0], 32), 0);
  EXPECT_EQ(wb[1].byte_len, 16u);
  EXPECT_EQ(ntohl(wb[1].imm_data), 77u);
  EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[65 * 1024]), "inline payload");
  EXPECT_EQ(std::memcmp(&buf_[96 * 1024], &buf_[0], 32), 0);
  std::memcpy(&word, &buf_[132 * 1024], 8);
  EXPECT_EQ(word, 5u);
  std::memcpy(&word, &buf_[128 * 1024], 8);
  EXPECT_EQ(word, 15u);

  // Abort discards; an unsupported builder makes complete post nothing.
  ibv_wr_start(qx);
  qx->wr_id = 30;
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, mr_->lkey, addr(0), 8);
  ibv_wr_abort(qx);
  ibv_wr_start(qx);
  qx->wr_id = 31;
  ibv_wr_rdma_write(qx, mr_->rkey, addr(96 * 1024));
  ibv_wr_set_sge(qx, mr_->lkey, addr(0), 8);
  ibv_wr_atomic_write(qx, mr_->rkey, addr(0), buf_.data());
  errno = 0;
  EXPECT_EQ(ibv_wr_complete(qx), EOPNOTSUPP);
  EXPECT_EQ(errno, EOPNOTSUPP);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(ca, 1, &wc), 0);
}

TEST_F(Verbs, CqExPollsAndKeepsWhatEndPollLeft) {
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 64;
  cx.cq_context = this;
  cx.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
  ibv_cq_ex* rx = ibv_create_cq_ex(ctx_, &cx);
  ASSERT_NE(rx, nullptr) << std::strerror(errno);
  cqs_.push_back(ibv_cq_ex_to_cq(rx));
  ibv_cq* sc = cq();
  ibv_qp* a = qp(IBV_QPT_RC, sc, sc);
  ibv_qp* b = qp(IBV_QPT_RC, sc, ibv_cq_ex_to_cq(rx));
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ibv_poll_cq_attr pa{};
  EXPECT_EQ(ibv_start_poll(rx, &pa), ENOENT);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(post_recv(b, 100 + i, 4096 * (i + 1), 4096), 0);
  for (int i = 0; i < 5; ++i) {
    ibv_sge s = sge(0, uint32_t(10 + i));
    ibv_send_wr wr{};
    wr.wr_id = uint64_t(i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(uint32_t(i));
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  }
  // All five are acknowledged, so all five receive completions are queued.
  ASSERT_EQ(poll(sc, 5).size(), 5u);

  ASSERT_EQ(ibv_start_poll(rx, &pa), 0);
  EXPECT_EQ(rx->wr_id, 100u);
  EXPECT_EQ(rx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(rx), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(rx), 10u);
  EXPECT_EQ(ntohl(ibv_wc_read_imm_data(rx)), 0u);
  EXPECT_EQ(ibv_wc_read_qp_num(rx), b->qp_num);
  EXPECT_EQ(ibv_wc_read_src_qp(rx), a->qp_num);
  EXPECT_TRUE(ibv_wc_read_wc_flags(rx) & IBV_WC_WITH_IMM);
  ASSERT_EQ(ibv_next_poll(rx), 0);
  EXPECT_EQ(rx->wr_id, 101u);
  EXPECT_EQ(ibv_wc_read_byte_len(rx), 11u);
  ibv_end_poll(rx);
  // The three the extended poll took from the core but did not hand out
  // come next, in order, through ibv_poll_cq.
  ibv_wc wc[8];
  ASSERT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(rx), 8, wc), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].wr_id, uint64_t(102 + i));
    EXPECT_EQ(wc[i].byte_len, uint32_t(12 + i));
  }
  EXPECT_EQ(ibv_start_poll(rx, &pa), ENOENT);
}

// ------------------------------------------------------------------ UD

TEST_F(Verbs, UdWithAnAddressHandleFromTheWorkCompletion) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_UD, c, c);
  ibv_qp* b = qp(IBV_QPT_UD, c, c);
  connect(a, 0);
  connect(b, 0);
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.grh.dgid = gid_;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  ASSERT_EQ(post_recv(b, 50, 8192, 40 + 256), 0);
  ASSERT_EQ(post_recv(a, 51, 16384, 40 + 256), 0);
  std::memcpy(&buf_[0], "ping", 5);
  ibv_sge s = sge(0, 5);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = b->qp_num;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto wc = poll(c, 2);
  ASSERT_EQ(wc.size(), 2u);
  const ibv_wc& r = wc[0].opcode == IBV_WC_RECV ? wc[0] : wc[1];
  EXPECT_EQ(r.wr_id, 50u);
  EXPECT_EQ(r.byte_len, 40u + 5);
  EXPECT_TRUE(r.wc_flags & IBV_WC_GRH);
  EXPECT_EQ(r.sl & 7, 2) << "sl carries the GRH area's network header type as mlx5 reports it (2: IPv4)";
  EXPECT_EQ(r.src_qp, a->qp_num);
  EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[8192 + 40]), "ping");
  // Reply to the sender with an AH made from the completion and its GRH.
  ibv_ah* back = ibv_create_ah_from_wc(pd_, const_cast<ibv_wc*>(&r), reinterpret_cast<ibv_grh*>(&buf_[8192]), 1);
  ASSERT_NE(back, nullptr) << std::strerror(errno);
  std::memcpy(&buf_[64], "pong", 5);
  s = sge(64, 5);
  wr.wr.ud.ah = back;
  wr.wr.ud.remote_qpn = r.src_qp;
  ASSERT_EQ(ibv_post_send(b, &wr, &bad), 0);
  wc = poll(c, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[16384 + 40]), "pong");
  EXPECT_EQ(ibv_destroy_ah(back), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

}  // namespace compat_test
