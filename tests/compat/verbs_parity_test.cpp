// compat.Verbs: what rdma-core's consumers (UCX, libfabric, rdma-core's own
// tests) rely on and kernel providers do: the attributes they check, a
// usable cmd_fd, ibv_rereg_mr keeping the keys, QP access flags beyond the
// rights passed through.
#include "support/fork_guard.hpp"
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

namespace compat_test {

// rdma-core's test_mr_rereg_addr / _pd: a receive posted with an lkey whose
// region then moved (or changed PD) no longer fits it.  The SEND that
// lands there fails: the receiver's WQE completes in error and the sender
// gets a Remote Operation Error NAK, as rxe and NICs answer (the QP pair
// recovers through RESET).
TEST_F(Verbs, ReceiveIntoARegionThatMovedIsARemoteOperationError) {
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  std::vector<uint8_t> target(2 * 4096, 0);
  ibv_mr* t = ibv_reg_mr(pd_, target.data(), 4096, kAllAccess);
  ASSERT_NE(t, nullptr);
  ibv_sge rs{reinterpret_cast<uintptr_t>(target.data()), 64, t->lkey};
  ibv_recv_wr rw{};
  rw.wr_id = 9;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(b, &rw, &rbad), 0);
  ASSERT_EQ(ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, target.data() + 4096, 4096, 0), 0);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto wa = poll(ca, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_REM_OP_ERR) << ibv_wc_status_str(wa[0].status);
  auto wb = poll(cb, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].wr_id, 9u);
  EXPECT_EQ(wb[0].status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wb[0].status);
  for (uint8_t x : target) ASSERT_EQ(x, 0);
  EXPECT_EQ(ibv_dereg_mr(t), 0);
}

}  // namespace compat_test

namespace compat_test {

// fork(): rdma-core's tests (and MPI launchers) fork processes that open
// the device while the parent has it open.  The child gets a NIC of its
// own: its RC traffic works and is byte-exact, and the parent's QPs, used
// before and after, are untouched.
TEST_F(Verbs, ForkedChildOpensANicOfItsOwn) {
  UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK();
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  // One WRITE of `n` bytes from [0, n) to [off, off + n) over QPs x -> y.
  auto write = [](ibv_qp* x, ibv_cq* cq, ibv_mr* mr, uint8_t* base, size_t off, uint32_t n) {
    ibv_sge s{reinterpret_cast<uintptr_t>(base), n, mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(base + off);
    wr.wr.rdma.rkey = mr->rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(x, &wr, &bad) != 0) return false;
    auto wc = poll(cq, 1);
    return wc.size() == 1 && wc[0].status == IBV_WC_SUCCESS;
  };
  for (int i = 0; i < 8192; ++i) buf_[i] = uint8_t(i * 3 + 1);
  ASSERT_TRUE(write(a, c, mr_, buf_.data(), 65536, 8192));
  ASSERT_EQ(std::memcmp(buf_.data(), buf_.data() + 65536, 8192), 0);

  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: a device of its own, 200 byte-checked WRITEs.
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_context* ctx = list && n ? ibv_open_device(list[0]) : nullptr;
    if (!ctx) _exit(10);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* ccq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    std::vector<uint8_t> mem(1 << 20);
    ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), kAllAccess);
    if (!pd || !ccq || !mr) _exit(11);
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = ccq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    ibv_qp* x = ibv_create_qp(pd, &qa);
    ibv_qp* y = ibv_create_qp(pd, &qa);
    if (!x || !y) _exit(12);
    ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    for (auto [q, dest] : {std::pair{x, y->qp_num}, std::pair{y, x->qp_num}}) {
      ibv_qp_attr at{};
      at.qp_state = IBV_QPS_INIT;
      at.port_num = 1;
      at.qp_access_flags = kAllAccess;
      if (ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) _exit(13);
      at = {};
      at.qp_state = IBV_QPS_RTR;
      at.path_mtu = IBV_MTU_1024;
      at.dest_qp_num = dest;
      at.ah_attr.is_global = 1;
      at.ah_attr.grh.dgid = gid;
      at.ah_attr.port_num = 1;
      at.max_dest_rd_atomic = 1;
      at.min_rnr_timer = 12;
      if (ibv_modify_qp(q, &at,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        _exit(14);
      at = {};
      at.qp_state = IBV_QPS_RTS;
      at.timeout = 14;
      at.retry_cnt = 7;
      at.rnr_retry = 7;
      at.max_rd_atomic = 1;
      if (ibv_modify_qp(q, &at,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC))
        _exit(15);
    }
    for (int round = 0; round < 200; ++round) {
      for (int i = 0; i < 4096; ++i) mem[i] = uint8_t(i + round);
      if (!write(x, ccq, mr, mem.data(), 524288, 4096)) _exit(16);
      if (std::memcmp(mem.data(), mem.data() + 524288, 4096) != 0) _exit(17);
    }
    _exit(0);  // (the child's objects go with it)
  }
  // The parent goes on meanwhile, then checks how the child ended.
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 8192; ++i) buf_[i] = uint8_t(i * 5 + round);
    ASSERT_TRUE(write(a, c, mr_, buf_.data(), 131072, 8192)) << "round " << round;
    ASSERT_EQ(std::memcmp(buf_.data(), buf_.data() + 131072, 8192), 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_TRUE(write(a, c, mr_, buf_.data(), 262144, 8192));
  EXPECT_EQ(std::memcmp(buf_.data(), buf_.data() + 262144, 8192), 0);
}

}  // namespace compat_test
