// XRC through the C ABI (issue 13): an XRC domain opened on a file, an XRC
// SRQ with its own CQ, an XRC_RECV QP that has neither, and an XRC_SEND QP
// whose WRs name the SRQ.  Messages land byte for byte in the SRQ's buffers
// and complete on the SRQ's CQ with the XRC_RECV QP's number; RDMA and
// atomics reach the SRQ's PD; a request naming an SRQ of another domain is
// refused (REM_INV_REQ_ERR at the sender) and nothing lands.
#include "verbs_xrc_fixture.hpp"

namespace compat_test {
namespace {

TEST_F(Xrc, DeviceAdvertisesXrc) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_XRC);
  EXPECT_NE(srqn_, 0u);
  EXPECT_EQ(recv_->pd, nullptr) << "an XRC_RECV QP has no PD";
}

// Messages of 1 B, several packets and 0 B, one with immediate data, into
// the SRQ's buffers in the order posted.
TEST_F(Xrc, SendsLandInTheSrqAndCompleteOnItsCq) {
  const uint32_t lens[] = {1, 3000, 0, 700};
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(post_srq(srq_, 100 + i, 600000 + i * 8192, 4096), 0);
  for (size_t i = 0; i < 4; ++i) {
    for (uint32_t k = 0; k < lens[i]; ++k) buf_[k] = uint8_t(i * 37 + k * 11 + 5);
    ibv_sge s = sge(0, lens[i]);
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &s;
    wr.num_sge = lens[i] ? 1 : 0;
    wr.opcode = i == 3 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = htonl(0xabcd0123);
    const ibv_wc sc = post_one(wr, srqn_);
    ASSERT_EQ(sc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc.status);
    EXPECT_EQ(sc.qp_num, send_->qp_num);
    auto rc = poll(rcq_, 1);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(rc[0].status);
    EXPECT_EQ(rc[0].wr_id, 100 + i);
    EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(rc[0].byte_len, lens[i]);
    EXPECT_EQ(rc[0].qp_num, recv_->qp_num) << "the XRC_RECV QP the message came through";
    EXPECT_EQ(bool(rc[0].wc_flags & IBV_WC_WITH_IMM), i == 3);
    if (i == 3) {
      EXPECT_EQ(rc[0].imm_data, htonl(0xabcd0123));
    }
    EXPECT_EQ(std::memcmp(buf_.data() + 600000 + i * 8192, buf_.data(), lens[i]), 0) << "message " << i;
  }
  EXPECT_TRUE(stays_empty(rcq_));
}

// WRITE, READ and an atomic through the XRC_RECV QP touch the SRQ's PD.
TEST_F(Xrc, WriteReadAndAtomicReachTheSrqsPd) {
  for (uint32_t k = 0; k < 5000; ++k) buf_[k] = uint8_t(k * 13 + 1);
  ibv_sge s = sge(0, 5000);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = addr(300000);
  wr.wr.rdma.rkey = mr_->rkey;
  ibv_wc c = post_one(wr, srqn_);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ASSERT_EQ(std::memcmp(buf_.data() + 300000, buf_.data(), 5000), 0);

  s = sge(400000, 5000);
  wr.opcode = IBV_WR_RDMA_READ;
  c = post_one(wr, srqn_);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.opcode, IBV_WC_RDMA_READ);
  ASSERT_EQ(std::memcmp(buf_.data() + 400000, buf_.data(), 5000), 0);

  uint64_t v = 40;
  std::memcpy(buf_.data() + 200000, &v, 8);
  s = sge(200008, 8);
  wr = {};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = addr(200000);
  wr.wr.atomic.rkey = mr_->rkey;
  wr.wr.atomic.compare_add = 2;
  c = post_one(wr, srqn_);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  uint64_t now = 0, before = 0;
  std::memcpy(&now, buf_.data() + 200000, 8);
  std::memcpy(&before, buf_.data() + 200008, 8);
  EXPECT_EQ(now, 42u);
  EXPECT_EQ(before, 40u);
  EXPECT_TRUE(stays_empty(rcq_)) << "no receive WQE is taken";
}

// An SRQ of another domain (its own, fd -1) cannot be reached through our
// XRC_RECV QP: the sender's WR fails REM_INV_REQ_ERR and nothing lands.
TEST_F(Xrc, AnSrqOfAnotherDomainIsRefused) {
  ibv_xrcd* other = open_xrcd(-1, O_CREAT);
  ASSERT_NE(other, nullptr) << std::strerror(errno);
  ibv_cq* ocq = cq();
  ibv_srq* osrq = xrc_srq(other, ocq);
  ASSERT_NE(osrq, nullptr);
  uint32_t on = 0;
  ASSERT_EQ(ibv_get_srq_num(osrq, &on), 0);
  ASSERT_NE(on, srqn_);
  ASSERT_EQ(post_srq(osrq, 7, 600000, 4096), 0);
  std::memset(buf_.data() + 600000, 0xee, 64);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  const ibv_wc c = post_one(wr, on);
  EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(c.status);
  EXPECT_TRUE(stays_empty(ocq));
  EXPECT_EQ(buf_[600000], 0xee);
}

// Two opens of one file are one domain: an SRQ made in the second is
// reached through the QP of the first.  O_CREAT and O_EXCL as the kernel.
TEST_F(Xrc, OpensOfOneFileAreOneDomain) {
  ibv_xrcd* again = open_xrcd(file_, 0);
  ASSERT_NE(again, nullptr) << std::strerror(errno);
  ibv_srq* s2 = xrc_srq(again, rcq_);
  ASSERT_NE(s2, nullptr);
  uint32_t n2 = 0;
  ASSERT_EQ(ibv_get_srq_num(s2, &n2), 0);
  ASSERT_EQ(post_srq(s2, 9, 600000, 4096), 0);
  for (int k = 0; k < 100; ++k) buf_[k] = uint8_t(k + 3);
  ibv_sge s = sge(0, 100);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ASSERT_EQ(post_one(wr, n2).status, IBV_WC_SUCCESS);
  auto rc = poll(rcq_, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 9u);
  EXPECT_EQ(std::memcmp(buf_.data() + 600000, buf_.data(), 100), 0);

  errno = 0;
  EXPECT_EQ(open_xrcd(file_, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  char path[] = "/tmp/uroce-xrc-XXXXXX";
  const int fresh = mkstemp(path);
  ASSERT_GE(fresh, 0);
  ::unlink(path);
  errno = 0;
  EXPECT_EQ(open_xrcd(fresh, 0), nullptr) << "a file with no domain, without O_CREAT";
  EXPECT_EQ(errno, EINVAL);
  ::close(fresh);
  errno = 0;
  EXPECT_EQ(open_xrcd(fresh, O_CREAT), nullptr) << "a closed descriptor";
  EXPECT_EQ(errno, EBADF);
}

TEST_F(Xrc, WhatXrcObjectsRefuse) {
  ibv_xrcd* x = xrcds_.front();
  EXPECT_EQ(ibv_close_xrcd(x), EBUSY) << "its SRQ and QP are open";
  ibv_sge s = sge(0, 8);
  ibv_recv_wr rw{};
  rw.sg_list = &s;
  rw.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(send_, &rw, &rbad), EINVAL);
  EXPECT_EQ(ibv_post_recv(recv_, &rw, &rbad), EINVAL);
  ibv_send_wr sw{};
  sw.sg_list = &s;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  ibv_send_wr* sbad = nullptr;
  EXPECT_EQ(ibv_post_send(recv_, &sw, &sbad), EINVAL);
  EXPECT_EQ(sbad, &sw);
  ibv_srq_init_attr basic{};
  basic.attr.max_wr = 4;
  basic.attr.max_sge = 1;
  ibv_srq* b = ibv_create_srq(pd_, &basic);
  ASSERT_NE(b, nullptr);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(b, &n), EINVAL);
  EXPECT_EQ(ibv_destroy_srq(b), 0);
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = recv_->qp_num;
  oa.xrcd = x;
  oa.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(ctx_, &oa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd_;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_, &a), nullptr) << "XRC_RECV without a domain";
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace compat_test
