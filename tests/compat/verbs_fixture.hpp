// The fixture of the compat.Verbs tests (verbs_*_test.cpp): the C ABI of
// uroce's libibverbs.so.1 as an application sees it: these files include
// only <infiniband/verbs.h> and link only our library.  Device
// uroce0 is UROCE_ADDR (set by ctest); the QPs of a test talk to each other
// over loopback through the device's one socket.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace compat_test {

using Clock = std::chrono::steady_clock;

inline constexpr unsigned kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

class Verbs : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_GE(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr) << std::strerror(errno);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid_), 0);
    buf_.assign(1 << 20, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(), kAllAccess);
    ASSERT_NE(mr_, nullptr);
  }

  void TearDown() override {
    if (HasFailure() && ctx_) dump_counters();
    for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) EXPECT_EQ(ibv_destroy_qp(*it), 0);
    for (ibv_cq* cq : cqs_) EXPECT_EQ(ibv_destroy_cq(cq), 0);
    if (mr_) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    if (pd_) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_) ibv_free_device_list(list_);
  }

  // After a failure: the counters of every uroce NIC of this user (ours and
  // those of the other processes on the address), to tell traffic that
  // reached the wrong process (rx_unknown_qp there) from traffic that never
  // left or never arrived.
  static void dump_counters() {
#ifdef UROCE_TOOL
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // published within 100 ms
    std::printf("counters after the failure (this is pid %d):\n", int(::getpid()));
    std::fflush(stdout);
    const std::string cmd = std::string("timeout 10 ") + UROCE_TOOL + " stat";
    if (std::system(cmd.c_str()) != 0) std::printf("(uroce stat failed)\n");
#endif
  }

  ibv_cq* cq(int cqe = 256, ibv_comp_channel* ch = nullptr) {
    ibv_cq* c = ibv_create_cq(ctx_, cqe, this, ch, 0);
    EXPECT_NE(c, nullptr);
    if (c) cqs_.push_back(c);
    return c;
  }

  ibv_qp* qp(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq;
    a.recv_cq = recv_cq;
    a.srq = srq;
    a.qp_type = type;
    a.cap = {64, srq ? 0u : 64u, 2, srq ? 0u : 2u, 0};
    ibv_qp* q = ibv_create_qp(pd_, &a);
    EXPECT_NE(q, nullptr) << std::strerror(errno);
    if (q) qps_.push_back(q);
    return q;
  }

  // RESET -> INIT -> RTR -> RTS towards QP `dest` at our own GID (or, with
  // `lid_only`, at our port's LID without a GRH).
  void connect(ibv_qp* q, uint32_t dest, bool lid_only = false) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (q->qp_type == IBV_QPT_UD) {
      a.qkey = 0x11111111;
      mask |= IBV_QP_QKEY;
    } else {
      a.qp_access_flags = q->qp_type == IBV_QPT_RC ? kAllAccess : unsigned(IBV_ACCESS_REMOTE_WRITE);
      mask |= IBV_QP_ACCESS_FLAGS;
    }
    ASSERT_EQ(ibv_modify_qp(q, &a, mask), 0) << std::strerror(errno);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (q->qp_type != IBV_QPT_UD) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = dest;
      a.rq_psn = 0;
      a.ah_attr.port_num = 1;
      if (lid_only) {
        ibv_port_attr pa;
        ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
        a.ah_attr.dlid = pa.lid;
      } else {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid_;
        a.ah_attr.grh.hop_limit = 64;
      }
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (q->qp_type == IBV_QPT_RC) {
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    ASSERT_EQ(ibv_modify_qp(q, &a, mask), 0) << std::strerror(errno);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (q->qp_type == IBV_QPT_RC) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 16;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    ASSERT_EQ(ibv_modify_qp(q, &a, mask), 0) << std::strerror(errno);
  }

  // Completions from `c` until `n` are there or 5 s pass; never more than
  // `n` (others stay queued: a CQ two QPs share may hold the peer's too).
  static std::vector<ibv_wc> poll(ibv_cq* c, size_t n) {
    std::vector<ibv_wc> out;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (out.size() < n && Clock::now() < deadline) {
      ibv_wc wc[16];
      const int got = ibv_poll_cq(c, int(std::min<size_t>(16, n - out.size())), wc);
      EXPECT_GE(got, 0);
      out.insert(out.end(), wc, wc + std::max(got, 0));
    }
    return out;
  }

  ibv_sge sge(size_t off, uint32_t len) const {
    return {reinterpret_cast<uintptr_t>(buf_.data()) + off, len, mr_->lkey};
  }
  uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(buf_.data()) + off; }

  // Posts one signaled SEND of `s` on `q`; the post's result.
  static int post_send_one(ibv_qp* q, ibv_sge s, uint64_t wr_id = 0) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q, &wr, &bad);
  }

  // A SEND of `len` bytes of pattern `seed` from a (completing on ca) to b
  // (on cb), received at buf_[at]: both completions succeed, the bytes land.
  void send_checked(ibv_qp* a, ibv_cq* ca, ibv_qp* b, ibv_cq* cb, uint32_t len, int seed, size_t at = 500000) {
    ASSERT_EQ(post_recv(b, uint64_t(seed), at, len), 0);
    for (size_t k = 0; k < len; ++k) buf_[k] = uint8_t(seed * 31 + k * 7 + 1);
    ASSERT_EQ(post_send_one(a, sge(0, len), uint64_t(seed)), 0);
    auto sa = poll(ca, 1);
    ASSERT_EQ(sa.size(), 1u);
    ASSERT_EQ(sa[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sa[0].status);
    auto rb = poll(cb, 1);
    ASSERT_EQ(rb.size(), 1u);
    ASSERT_EQ(rb[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(rb[0].status);
    ASSERT_EQ(rb[0].wr_id, uint64_t(seed));
    ASSERT_EQ(rb[0].byte_len, len);
    ASSERT_EQ(std::memcmp(buf_.data() + at, buf_.data(), len), 0) << "message " << seed;
  }

  int post_recv(ibv_qp* q, uint64_t wr_id, size_t off, uint32_t len) {
    ibv_sge s = sge(off, len);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(q, &wr, &bad);
  }

  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_gid gid_{};
  std::vector<uint8_t> buf_;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_cq*> cqs_;
};

}  // namespace compat_test
