// compat.Verbs: what rdma-core's consumers (UCX, libfabric, rdma-core's own
// tests) rely on and kernel providers do: the attributes they check, a
// usable cmd_fd, ibv_rereg_mr keeping the keys, QP access flags beyond the
// rights passed through.
#include "verbs_fixture.hpp"

namespace compat_test {

TEST_F(Verbs, DeviceAnswersAsConsumersExpect) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_NE(a.vendor_id, 0u);               // rdma-core's test_device: a device has a vendor
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);  // UCX enables device atomics for HCA only
  // cmd_fd: a descriptor of the context, close-on-exec, that dup() accepts.
  ASSERT_GE(ctx_->cmd_fd, 0);
  const int flags = fcntl(ctx_->cmd_fd, F_GETFD);
  ASSERT_GE(flags, 0) << std::strerror(errno);
  EXPECT_TRUE(flags & FD_CLOEXEC);
  const int d = dup(ctx_->cmd_fd);
  ASSERT_GE(d, 0);
  close(d);
  // ibv_import_device of it: no kernel object to share.
  errno = 0;
  EXPECT_EQ(ibv_import_device(ctx_->cmd_fd), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Verbs, RegMrAgainKeepsTheKeysAndTakesEffect) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  std::vector<uint8_t> target(2 * 65536, 0xee);
  ibv_mr* t = ibv_reg_mr(pd_, target.data(), 65536, kAllAccess);
  ASSERT_NE(t, nullptr);
  const uint32_t lkey = t->lkey, rkey = t->rkey;
  // Move the region to the second half of `target`: same keys, as a peer
  // that cached the rkey before the re-registration expects.
  ASSERT_EQ(ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, target.data() + 65536, 65536, 0), 0);
  EXPECT_EQ(t->lkey, lkey);
  EXPECT_EQ(t->rkey, rkey);
  EXPECT_EQ(t->addr, target.data() + 65536);
  for (int i = 0; i < 4096; ++i) buf_[i] = uint8_t(i * 13 + 1);
  auto write = [&](uint64_t wr_id) {
    ibv_sge s = sge(0, 4096);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data() + 65536 + 100);
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(a, &wr, &bad), 0);
    auto wc = poll(c, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? IBV_WC_GENERAL_ERR : wc[0].status;
  };
  EXPECT_EQ(write(1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(target.data() + 65536 + 100, buf_.data(), 4096), 0);
  for (size_t i = 0; i < 65536; ++i) ASSERT_EQ(target[i], 0xee) << "the old range was written at " << i;
  // Taking REMOTE_WRITE away is seen by the next WRITE.
  ASSERT_EQ(ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE), 0);
  EXPECT_EQ(t->rkey, rkey);
  EXPECT_EQ(write(2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(t), 0);
}

TEST_F(Verbs, QpAccessFlagsBeyondTheRightsArePassedThrough) {
  ibv_cq* c = cq();
  ibv_qp* q = qp(IBV_QPT_RC, c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  // rdma-core's ODP tests set ON_DEMAND on the QP; the kernel keeps it.
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND;
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0)
      << std::strerror(errno);
  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(q, &got, IBV_QP_ACCESS_FLAGS, &init), 0);
  EXPECT_EQ(got.qp_access_flags, unsigned(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND));
}

}  // namespace compat_test
