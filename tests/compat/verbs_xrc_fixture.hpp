// The fixture of the compat.Verbs XRC tests: an XRC domain opened on a
// (deleted) file, an XRC SRQ with its own CQ, an XRC_RECV QP and an
// XRC_SEND QP connected to each other over loopback.
#pragma once

#include "verbs_fixture.hpp"

namespace compat_test {

class Xrc : public Verbs {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(make_file());
    ASSERT_NO_FATAL_FAILURE(set_up_on_file());
  }
  // The domain's (deleted) file, before any device is open.
  void make_file() {
    char path[] = "/tmp/uroce-xrc-XXXXXX";
    file_ = mkstemp(path);
    ASSERT_GE(file_, 0);
    ::unlink(path);
  }
  // The device, the domain on file_ and the objects in it.
  void set_up_on_file() {
    ASSERT_NO_FATAL_FAILURE(Verbs::SetUp());
    xrcd_ = open_xrcd(file_, O_CREAT);
    ASSERT_NE(xrcd_, nullptr) << std::strerror(errno);
    rcq_ = cq();
    scq_ = cq();
    srq_ = xrc_srq(xrcd_, rcq_);
    ASSERT_NE(srq_, nullptr) << std::strerror(errno);
    ASSERT_EQ(ibv_get_srq_num(srq_, &srqn_), 0);
    recv_ = xrc_recv_qp(xrcd_);
    ASSERT_NE(recv_, nullptr) << std::strerror(errno);
    send_ = xrc_send_qp();
    ASSERT_NE(send_, nullptr) << std::strerror(errno);
    connect_xrc(recv_, send_->qp_num);
    connect_xrc(send_, recv_->qp_num);
  }
  void TearDown() override {
    for (ibv_qp* q : qps_) EXPECT_EQ(ibv_destroy_qp(q), 0);
    for (ibv_srq* s : srqs_) EXPECT_EQ(ibv_destroy_srq(s), 0);
    for (ibv_cq* c : cqs_) EXPECT_EQ(ibv_destroy_cq(c), 0);
    for (ibv_xrcd* x : xrcds_) EXPECT_EQ(ibv_close_xrcd(x), 0);
    if (file_ >= 0) ::close(file_);
    Verbs::TearDown();
  }

  ibv_xrcd* open_xrcd(int fd, int oflags) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = fd;
    a.oflags = oflags;
    ibv_xrcd* x = ibv_open_xrcd(ctx_, &a);
    if (x) xrcds_.insert(xrcds_.begin(), x);  // closed after what is in them
    return x;
  }
  ibv_cq* cq() {
    ibv_cq* c = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
    EXPECT_NE(c, nullptr);
    if (c) cqs_.push_back(c);
    return c;
  }
  ibv_srq* xrc_srq(ibv_xrcd* x, ibv_cq* c) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 16;
    a.attr.max_sge = 1;
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    a.srq_type = IBV_SRQT_XRC;
    a.xrcd = x;
    a.cq = c;
    a.pd = pd_;
    ibv_srq* s = ibv_create_srq_ex(ctx_, &a);
    if (s) srqs_.insert(srqs_.begin(), s);
    return s;
  }
  ibv_qp* xrc_recv_qp(ibv_xrcd* x) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = x;
    ibv_qp* q = ibv_create_qp_ex(ctx_, &a);
    if (q) qps_.insert(qps_.begin(), q);
    return q;
  }
  ibv_qp* xrc_send_qp() {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_SEND;
    a.send_cq = scq_;
    a.recv_cq = scq_;
    a.cap.max_send_wr = 16;
    a.cap.max_send_sge = 1;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd_;
    ibv_qp* q = ibv_create_qp_ex(ctx_, &a);
    if (q) qps_.insert(qps_.begin(), q);
    return q;
  }
  // The attributes ibv_xsrq_pingpong gives each half, no more.
  void connect_xrc(ibv_qp* q, uint32_t dest) {
    const bool tgt = q->qp_type == IBV_QPT_XRC_RECV;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = tgt ? kAllAccess : 0;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0)
        << std::strerror(errno);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid_;
    a.ah_attr.grh.hop_limit = 64;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (tgt) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    ASSERT_EQ(ibv_modify_qp(q, &a, mask), 0) << std::strerror(errno);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (!tgt) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    ASSERT_EQ(ibv_modify_qp(q, &a, mask), 0) << std::strerror(errno);
  }
  int post_srq(ibv_srq* s, uint64_t wr_id, size_t off, uint32_t len) {
    ibv_sge g = sge(off, len);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &g;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(s, &wr, &bad);
  }
  // One signaled WR on the XRC_SEND QP for SRQ `srqn`; its completion.
  ibv_wc post_one(ibv_send_wr wr, uint32_t srqn) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(send_, &wr, &bad), 0);
    auto c = poll(scq_, 1);
    EXPECT_EQ(c.size(), 1u);
    return c.empty() ? ibv_wc{} : c[0];
  }

  // True if `c` stays empty for 100 ms (what would arrive has had its time).
  static bool stays_empty(ibv_cq* c) {
    const auto until = Clock::now() + std::chrono::milliseconds(100);
    ibv_wc wc;
    while (Clock::now() < until)
      if (ibv_poll_cq(c, 1, &wc) != 0) return false;
    return true;
  }

  int file_ = -1;
  ibv_xrcd* xrcd_ = nullptr;
  ibv_cq *rcq_ = nullptr, *scq_ = nullptr;
  ibv_srq* srq_ = nullptr;
  uint32_t srqn_ = 0;
  ibv_qp *recv_ = nullptr, *send_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_srq*> srqs_;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_xrcd*> xrcds_;
};

}  // namespace compat_test
