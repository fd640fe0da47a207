// The C ABI of uroce's libibverbs.so.1 as an application sees it: this file
// includes only <infiniband/verbs.h> and links only our library.  Device
// uroce0 is UROCE_ADDR (set by ctest); the QPs of a test talk to each other
// over loopback through the device's one socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kAllAccess =
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

  // Completions from `c` until `n` are there or 5 s pass.
  static std::vector<ibv_wc> poll(ibv_cq* c, size_t n) {
    std::vector<ibv_wc> out;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (out.size() < n && Clock::now() < deadline) {
      ibv_wc wc[16];
      const int got = ibv_poll_cq(c, 16, wc);
      EXPECT_GE(got, 0);
      out.insert(out.end(), wc, wc + std::max(got, 0));
    }
    return out;
  }

  ibv_sge sge(size_t off, uint32_t len) const {
    return {reinterpret_cast<uintptr_t>(buf_.data()) + off, len, mr_->lkey};
  }
  uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(buf_.data()) + off; }

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

// ------------------------------------------------------------------ devices

TEST_F(Verbs, DeviceListOutlivesFree) {
  int n = 0;
  ibv_device** l = ibv_get_device_list(&n);
  ASSERT_NE(l, nullptr);
  ibv_device* d = l[0];
  EXPECT_EQ(l[n], nullptr);
  ibv_free_device_list(l);
  // Devices stay valid after the list is freed.
  EXPECT_STREQ(ibv_get_device_name(d), "uroce0");
  EXPECT_EQ(d->transport_type, IBV_TRANSPORT_IB);
  EXPECT_EQ(d->node_type, IBV_NODE_CA);
  EXPECT_NE(ibv_get_device_guid(d), 0u);
}

TEST_F(Verbs, QueryDevicePortAndGids) {
  ibv_device_attr_ex dx{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dx), 0);
  EXPECT_EQ(dx.orig_attr.phys_port_cnt, 1);
  EXPECT_GT(dx.orig_attr.max_qp_wr, 0);
  EXPECT_EQ(dx.orig_attr.node_guid, ibv_get_device_guid(ctx_->device));
  EXPECT_TRUE(dx.odp_caps.general_caps & IBV_ODP_SUPPORT);
  EXPECT_TRUE(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);  // loopback
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.gid_tbl_len, 1);
  // GID 0 is the IPv4-mapped first address of UROCE_ADDR, RoCE v2.
  std::string first = std::getenv("UROCE_ADDR") ? std::getenv("UROCE_ADDR") : "127.0.0.1";
  first = first.substr(0, first.find(','));
  uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (first.find(':') == std::string::npos)
    ASSERT_EQ(inet_pton(AF_INET, first.c_str(), want + 12), 1);
  else
    ASSERT_EQ(inet_pton(AF_INET6, first.c_str(), want), 1);
  EXPECT_EQ(std::memcmp(gid_.raw, want, 16), 0);
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_NE(e.ndev_ifindex, 0u);
  ibv_gid_entry table[4];
  EXPECT_EQ(ibv_query_gid_table(ctx_, table, 4, 0), 1);
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xffff);
}

// ------------------------------------------------------------------ conventions

TEST_F(Verbs, ErrnoAndReturnConventions) {
  // int verbs return the errno value and set errno.
  errno = 0;
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // mr_ is in it
  EXPECT_EQ(errno, EBUSY);
  ibv_port_attr pa;
  errno = 0;
  EXPECT_EQ(ibv_query_port(ctx_, 2, &pa), EINVAL);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq* c = cq();
  ibv_qp* q = qp(IBV_QPT_RC, c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;  // RESET -> RTS is no transition
  errno = 0;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_destroy_cq(c), EBUSY);  // the QP uses it
  EXPECT_EQ(errno, EBUSY);
  // Pointer verbs return NULL and set errno.
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The ones documented to return -1.
  ibv_gid g;
  errno = 0;
  EXPECT_EQ(ibv_query_gid(ctx_, 1, 7, &g), -1);
  EXPECT_EQ(errno, EINVAL);
  // Posting to a QP in RESET: the first WR is the bad one.
  ibv_sge s = sge(0, 8);
  ibv_recv_wr r{};
  r.sg_list = &s;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  errno = 0;
  EXPECT_EQ(ibv_post_recv(q, &r, &bad), EINVAL);
  EXPECT_EQ(bad, &r);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Verbs, UnsupportedFeaturesSayEopnotsupp) {
  ibv_cq* c = cq();
  ibv_qp* q = qp(IBV_QPT_RC, c, c);
  auto expect_null = [](void* p, const char* what) {
    EXPECT_EQ(p, nullptr) << what;
    EXPECT_EQ(errno, EOPNOTSUPP) << what;
    errno = 0;
  };
  errno = 0;
  expect_null(ibv_alloc_mw(pd_, IBV_MW_TYPE_2), "alloc_mw");
  ibv_alloc_dm_attr dm{4096, 0, 0};
  expect_null(ibv_alloc_dm(ctx_, &dm), "alloc_dm");
  ibv_xrcd_init_attr xa{};
  expect_null(ibv_open_xrcd(ctx_, &xa), "open_xrcd");
  ibv_td_init_attr ta{};
  expect_null(ibv_alloc_td(ctx_, &ta), "alloc_td");
  expect_null(ibv_reg_dmabuf_mr(pd_, 0, 4096, 0, 0, 0), "reg_dmabuf_mr");
  expect_null(ibv_import_pd(ctx_, 1), "import_pd");
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 16;
  cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  expect_null(ibv_create_cq_ex(ctx_, &cx), "create_cq_ex with timestamps");
  ibv_qp_init_attr raw{};
  raw.send_cq = raw.recv_cq = c;
  raw.qp_type = IBV_QPT_RAW_PACKET;
  raw.cap = {1, 1, 1, 1, 0};
  expect_null(ibv_create_qp(pd_, &raw), "raw packet QP");
  ibv_qp_init_attr_ex qx{};
  qx.send_cq = qx.recv_cq = c;
  qx.qp_type = IBV_QPT_RC;
  qx.cap = {1, 1, 1, 1, 0};
  qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qx.pd = pd_;
  qx.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
  expect_null(ibv_create_qp_ex(ctx_, &qx), "create_qp_ex with TSO");
  ibv_srq_init_attr_ex sx{};
  sx.attr = {16, 1, 0};
  sx.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
  sx.pd = pd_;
  sx.srq_type = IBV_SRQT_XRC;
  expect_null(ibv_create_srq_ex(ctx_, &sx), "XRC SRQ");
  ibv_flow_attr fa{};
  fa.size = sizeof fa;
  expect_null(ibv_create_flow(q, &fa), "create_flow");

  EXPECT_EQ(ibv_attach_mcast(q, &gid_, 0), EOPNOTSUPP);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_qp_attr a{};
  a.rate_limit = 1000;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_RATE_LIMIT), EOPNOTSUPP);
  ibv_modify_cq_attr ma{};
  EXPECT_EQ(ibv_modify_cq(c, &ma), EOPNOTSUPP);
  ibv_values_ex v{};
  EXPECT_EQ(ibv_query_rt_values_ex(ctx_, &v), EOPNOTSUPP);
  ibv_ece ece{};
  EXPECT_EQ(ibv_query_ece(q, &ece), EOPNOTSUPP);
  uint8_t mac[6];
  uint16_t vid;
  ibv_ah_attr aa{};
  EXPECT_EQ(ibv_resolve_eth_l2_from_gid(ctx_, &aa, mac, &vid), EOPNOTSUPP);

  // An unsupported opcode is refused at post time: *bad_wr is that WR.
  connect(q, q->qp_num);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_LOCAL_INV;
  ibv_send_wr* bad = nullptr;
  errno = 0;
  EXPECT_EQ(ibv_post_send(q, &wr, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Verbs, ForkAndStrings) {
  EXPECT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED), "SRQ limit reached");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
  EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
}

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
  ibv_wr_local_inv(qx, 1234);
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

// ------------------------------------------------------------------ events

TEST_F(Verbs, CompletionChannelEvents) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = cq(64, ch);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  connect(a, a->qp_num);
  ASSERT_EQ(ibv_req_notify_cq(c, 0), 0);
  ibv_sge s = sge(0, 8);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr(4096);
  wr.wr.rdma.rkey = mr_->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, c);
  EXPECT_EQ(ev_ctx, this);
  EXPECT_EQ(poll(c, 1).size(), 1u);
  ibv_ack_cq_events(c, 1);
  // The fd is a real one: non-blocking, with nothing queued, says EAGAIN.
  pollfd pfd{ch->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // the CQ uses it
  ASSERT_EQ(ibv_destroy_qp(a), 0);
  qps_.clear();
  ASSERT_EQ(ibv_destroy_cq(c), 0);
  cqs_.clear();
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

void on_alarm(int) {}

// A blocking ibv_get_cq_event behaves like rdma-core's read() of the fd: a
// signal handler without SA_RESTART interrupts it (EINTR: qperf ends its
// tests so), one with SA_RESTART does not.
TEST_F(Verbs, GetCqEventAndSignals) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = cq(64, ch);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  connect(a, a->qp_num);
  ASSERT_EQ(ibv_req_notify_cq(c, 0), 0);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  ASSERT_EQ(sigaction(SIGALRM, &sa, &old), 0);
  itimerval t{};
  t.it_value.tv_usec = 100000;
  ASSERT_EQ(setitimer(ITIMER_REAL, &t, nullptr), 0);
  ibv_cq* ev_cq;
  void* ev_ctx;
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EINTR);

  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGALRM, &sa, nullptr), 0);
  ASSERT_EQ(setitimer(ITIMER_REAL, &t, nullptr), 0);
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ibv_sge s = sge(0, 8);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = addr(4096);
    wr.wr.rdma.rkey = mr_->rkey;
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(a, &wr, &bad), 0);
  });
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);  // not interrupted at 100 ms
  poster.join();
  EXPECT_EQ(ev_cq, c);
  ibv_ack_cq_events(c, 1);
  EXPECT_EQ(poll(c, 1).size(), 1u);
  sigaction(SIGALRM, &old, nullptr);
  ASSERT_EQ(ibv_destroy_qp(a), 0);
  qps_.clear();
  ASSERT_EQ(ibv_destroy_cq(c), 0);
  cqs_.clear();
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Verbs, SrqLimitAsyncEvent) {
  ibv_srq_init_attr si{};
  si.srq_context = this;
  si.attr = {16, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  EXPECT_GE(si.attr.max_wr, 16u);
  for (int i = 0; i < 10; ++i) {
    ibv_sge s = sge(4096 * (i + 1), 4096);
    ibv_recv_wr r{};
    r.wr_id = uint64_t(i);
    r.sg_list = &s;
    r.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &r, &bad), 0);
  }
  ibv_srq_attr lim{0, 0, 8};
  ASSERT_EQ(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), 0);
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c, srq);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  for (int i = 0; i < 3; ++i) {
    ibv_sge s = sge(0, 16);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  }
  EXPECT_EQ(poll(c, 6).size(), 6u);
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq);
  EXPECT_EQ(ev.element.srq->srq_context, this);
  ibv_ack_async_event(&ev);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);              // the event disarms the limit
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);  // b uses it
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
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
  EXPECT_EQ(r.src_qp, a->qp_num);
  EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[8192 + 40]), "ping");
  // Reply to the sender with an AH made from the completion and its GRH.
  ibv_ah* back =
      ibv_create_ah_from_wc(pd_, const_cast<ibv_wc*>(&r), reinterpret_cast<ibv_grh*>(&buf_[8192]), 1);
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

// ------------------------------------------------------------------ ODP

// Implicit ODP covers the whole address space; a peer's access to memory
// that is not mapped (or not writable, for a write or an atomic) is a remote
// access error, and the process that owns the memory does not crash.
TEST_F(Verbs, OdpAccessToUnmappedMemoryIsARemoteAccessError) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto* area = static_cast<uint8_t*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  uint8_t* rw = area;
  uint8_t* ro = area + page;
  uint8_t* gone = area + 2 * page;
  std::memset(ro, 0x5a, page);
  ASSERT_EQ(mprotect(ro, page, PROT_READ), 0);
  ASSERT_EQ(munmap(gone, page), 0);

  // Without ODP, registering a range with a hole fails; with ODP it does not.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, area, 3 * page, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* explicit_odp = ibv_reg_mr(pd_, area, 3 * page, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(explicit_odp, nullptr);
  ibv_mr* implicit = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(implicit, nullptr) << std::strerror(errno);
  EXPECT_EQ(implicit->length, SIZE_MAX);

  ibv_cq* c = cq();
  // One fresh pair per access (an error moves the requester to ERR).
  auto access = [&](ibv_wr_opcode op, uint8_t* target, uint32_t rkey) {
    ibv_qp* a = qp(IBV_QPT_RC, c, c);
    ibv_qp* b = qp(IBV_QPT_RC, c, c);
    connect(a, b->qp_num);
    connect(b, a->qp_num);
    ibv_sge s = sge(0, 8);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(target);
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 1;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target);
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(a, &wr, &bad), 0);
    auto wc = poll(c, 1);
    return wc.size() == 1 ? wc[0].status : IBV_WC_GENERAL_ERR;
  };
  std::memcpy(&buf_[0], "odp-data", 8);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rw, implicit->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(rw, "odp-data", 8), 0);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, ro, implicit->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[0], 0x5a);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, gone, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, gone, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, ro, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_ATOMIC_FETCH_AND_ADD, ro, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_WRITE, gone, explicit_odp->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_RDMA_READ, nullptr, implicit->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(access(IBV_WR_ATOMIC_FETCH_AND_ADD, rw + 8, implicit->rkey), IBV_WC_SUCCESS);

  // Prefetch faults mapped ranges in and refuses the others.
  ibv_sge s{reinterpret_cast<uintptr_t>(rw), uint32_t(page), implicit->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IB_UVERBS_ADVISE_MR_FLAG_FLUSH, &s, 1),
            0);
  s.addr = reinterpret_cast<uintptr_t>(ro);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &s, 1), EFAULT);
  s.addr = reinterpret_cast<uintptr_t>(gone);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), EFAULT);
  s = sge(0, 8);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), EOPNOTSUPP);  // not ODP

  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_dereg_mr(implicit), 0);
  EXPECT_EQ(ibv_dereg_mr(explicit_odp), 0);
  munmap(area, 2 * page);
}

}  // namespace
