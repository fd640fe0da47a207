// UD multicast through the C ABI (issue 13): ibv_attach_mcast joins a QP to
// a group (an IPv4-mapped 239.x GID); a UD send to the group with QPN
// 0xFFFFFF reaches every attached QP of the host once, byte for byte, but
// not the QP that sent it; a detached QP gets nothing more.
#include <unistd.h>

#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

// A group of this process's own (tests run side by side on one host).
ibv_gid group(int n) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 239;
  g.raw[13] = 79;
  g.raw[14] = uint8_t(getpid());
  g.raw[15] = uint8_t(n);
  return g;
}

class Mcast : public Verbs {
 protected:
  ibv_qp* ud(ibv_cq* c) {
    ibv_qp* q = qp(IBV_QPT_UD, c, c);
    if (q) connect(q, 0);
    return q;
  }
  ibv_ah* ah_to(const ibv_gid& g) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.grh.dgid = g;
    a.grh.hop_limit = 1;
    a.port_num = 1;
    ibv_ah* ah = ibv_create_ah(pd_, &a);
    EXPECT_NE(ah, nullptr) << std::strerror(errno);
    return ah;
  }
  // A UD SEND of `len` bytes of pattern `seed` to the group.
  void send(ibv_qp* q, ibv_cq* c, ibv_ah* ah, uint32_t len, int seed) {
    for (uint32_t k = 0; k < len; ++k) buf_[k] = uint8_t(seed * 29 + k);
    ibv_sge s = sge(0, len);
    ibv_send_wr wr{};
    wr.wr_id = uint64_t(seed);
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xffffff;
    wr.wr.ud.remote_qkey = 0x11111111;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q, &wr, &bad), 0);
    auto w = poll(c, 1);
    ASSERT_EQ(w.size(), 1u);
    ASSERT_EQ(w[0].status, IBV_WC_SUCCESS);
  }
};

TEST_F(Mcast, EveryAttachedQpGetsEachMessageOnce) {
  ibv_cq* cs = cq();
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* sender = ud(cs);
  ibv_qp* r1 = ud(c1);
  ibv_qp* r2 = ud(c2);
  ASSERT_TRUE(sender && r1 && r2);
  const ibv_gid g = group(1);
  ASSERT_EQ(ibv_attach_mcast(r1, &g, 0), 0) << std::strerror(errno);
  ASSERT_EQ(ibv_attach_mcast(r2, &g, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(sender, &g, 0), 0) << "the sender subscribes too: it must not hear itself";
  errno = 0;
  EXPECT_EQ(ibv_attach_mcast(r1, &g, 0), EINVAL) << "attached twice";
  ibv_ah* ah = ah_to(g);
  ASSERT_NE(ah, nullptr);
  constexpr int kMsgs = 20;
  constexpr uint32_t kLen = 200;
  for (ibv_qp* r : {r1, r2, sender})
    for (int i = 0; i < kMsgs; ++i)
      ASSERT_EQ(post_recv(r, uint64_t(i),
                          200000 +
                              size_t(r == r1   ? 0
                                     : r == r2 ? 1
                                               : 2) *
                                  100000 +
                              size_t(i) * 256,
                          40 + kLen),
                0);
  for (int i = 0; i < kMsgs; ++i) {
    send(sender, cs, ah, kLen, i);
    for (auto [r, c, base] : {std::tuple{r1, c1, size_t(200000)}, std::tuple{r2, c2, size_t(300000)}}) {
      auto w = poll(c, 1);
      ASSERT_EQ(w.size(), 1u) << "message " << i;
      EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(w[0].wr_id, uint64_t(i));
      EXPECT_EQ(w[0].byte_len, 40 + kLen);
      EXPECT_EQ(w[0].src_qp, sender->qp_num);
      EXPECT_TRUE(w[0].wc_flags & IBV_WC_GRH);
      const uint8_t* got = buf_.data() + base + size_t(i) * 256 + 40;
      for (uint32_t k = 0; k < kLen; ++k) ASSERT_EQ(got[k], uint8_t(i * 29 + k)) << "message " << i << " byte " << k;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ibv_wc extra[4];
  EXPECT_EQ(ibv_poll_cq(c1, 4, extra), 0) << "each message once";
  EXPECT_EQ(ibv_poll_cq(c2, 4, extra), 0);
  EXPECT_EQ(ibv_poll_cq(cs, 4, extra), 0) << "the sender does not hear itself";
  // r2 leaves: r1 still gets the next message, r2 nothing.
  ASSERT_EQ(ibv_detach_mcast(r2, &g, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(r2, &g, 0), EINVAL) << "detached twice";
  ASSERT_EQ(post_recv(r1, 99, 200000 + kMsgs * 256, 40 + kLen), 0);
  ASSERT_EQ(post_recv(r2, 99, 300000 + kMsgs * 256, 40 + kLen), 0);
  send(sender, cs, ah, kLen, 99);
  EXPECT_EQ(poll(c1, 1).size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ibv_poll_cq(c2, 4, extra), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(Mcast, OnlyUdQpsJoinMulticastGids) {
  ibv_cq* c = cq();
  ibv_qp* rc = qp(IBV_QPT_RC, c, c);
  ibv_qp* u = qp(IBV_QPT_UD, c, c);
  const ibv_gid g = group(2);
  errno = 0;
  EXPECT_EQ(ibv_attach_mcast(rc, &g, 0), EINVAL);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_attach_mcast(u, &gid_, 0), EINVAL) << "a unicast GID";
  EXPECT_EQ(ibv_detach_mcast(u, &g, 0), EINVAL) << "never attached";
  EXPECT_EQ(ibv_attach_mcast(u, &g, 0), 0);
  // Destroying an attached QP leaves the group (TearDown destroys it).
}

// The limits the device reports hold: a group takes max_mcast_qp_attach QPs.
TEST_F(Mcast, AGroupTakesMaxMcastQpAttachQps) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  ASSERT_GT(a.max_mcast_grp, 0);
  ASSERT_GT(a.max_mcast_qp_attach, 0);
  ASSERT_LT(a.max_mcast_qp_attach, 1000);
  EXPECT_EQ(a.max_total_mcast_qp_attach, a.max_mcast_grp * a.max_mcast_qp_attach);
  ibv_cq* c = cq(1024);
  const ibv_gid g = group(3);
  for (int i = 0; i < a.max_mcast_qp_attach; ++i) {
    ibv_qp* q = qp(IBV_QPT_UD, c, c);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(ibv_attach_mcast(q, &g, 0), 0) << i;
  }
  ibv_qp* one_more = qp(IBV_QPT_UD, c, c);
  ASSERT_NE(one_more, nullptr);
  EXPECT_EQ(ibv_attach_mcast(one_more, &g, 0), ENOMEM);
}

}  // namespace
}  // namespace compat_test
