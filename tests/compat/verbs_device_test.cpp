// compat.Verbs: devices, ports and GIDs; errno and return conventions; what is unsupported.
#include "verbs_fixture.hpp"

namespace compat_test {

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
  ibv_alloc_dm_attr dm{4096, 0, 0};
  expect_null(ibv_alloc_dm(ctx_, &dm), "alloc_dm");
  ibv_td_init_attr ta{};
  expect_null(ibv_alloc_td(ctx_, &ta), "alloc_td");
  expect_null(ibv_reg_dmabuf_mr(pd_, 0, 4096, 0, 0, 0), "reg_dmabuf_mr");
  expect_null(ibv_import_pd(ctx_, 1), "import_pd");
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 16;
  cx.wc_flags = IBV_WC_EX_WITH_FLOW_TAG;
  expect_null(ibv_create_cq_ex(ctx_, &cx), "create_cq_ex with flow tags");
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
  sx.srq_type = IBV_SRQT_TM;
  expect_null(ibv_create_srq_ex(ctx_, &sx), "tag-matching SRQ");
  ibv_flow_attr fa{};
  fa.size = sizeof fa;
  expect_null(ibv_create_flow(q, &fa), "create_flow");

  ibv_qp_attr a{};
  a.rate_limit = 1000;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_RATE_LIMIT), EOPNOTSUPP);
  ibv_modify_cq_attr ma{};
  EXPECT_EQ(ibv_modify_cq(c, &ma), EOPNOTSUPP);
  ibv_ece ece{};
  EXPECT_EQ(ibv_query_ece(q, &ece), EOPNOTSUPP);
  uint8_t mac[6];
  uint16_t vid;
  ibv_ah_attr aa{};
  EXPECT_EQ(ibv_resolve_eth_l2_from_gid(ctx_, &aa, mac, &vid), EOPNOTSUPP);

  // An unsupported opcode is refused at post time: *bad_wr is that WR.
  connect(q, q->qp_num);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_TSO;
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

}  // namespace compat_test
