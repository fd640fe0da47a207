// uroce::ProtectionDomain: creating its children, refusing what cannot
// work, and the children-first destruction rule.
#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

struct One {
  One() {
    ctx = must(Context::open(local_device("127.0.0.1")), "open");
    cq = must(ctx->create_cq(16), "create_cq");
    pd = must(ctx->alloc_pd(), "alloc_pd");
  }
  std::optional<Context> ctx;
  std::optional<CompletionQueue> cq;
  std::optional<ProtectionDomain> pd;
};

TEST(ProtectionDomain, CreatesEveryKindOfChild) {
  One o;
  std::vector<std::byte> buf(4096);
  auto mr = must(o.pd->reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr");
  auto srq = must(o.pd->create_srq({}), "create_srq");
  AhAttr ah;
  ah.dgid = ip("127.0.0.2");
  auto handle = must(o.pd->create_ah(ah), "create_ah");
  for (QpType t : {QpType::rc, QpType::uc, QpType::ud}) {
    QpConfig qc;
    qc.type = t;
    qc.send_cq = qc.recv_cq = &*o.cq;
    auto qp = must(o.pd->create_qp(qc), std::string("create_qp ") + to_string(t));
    EXPECT_EQ(qp.type(), t);
    EXPECT_EQ(qp.state(), QpState::reset);
    EXPECT_NE(qp.qpn(), 0u);
    EXPECT_LT(qp.qpn(), 1u << 24);
    // Granted capabilities are at least those asked for.
    EXPECT_GE(qp.cap().max_send_wr, qc.cap.max_send_wr);
    EXPECT_GE(qp.cap().max_inline_data, qc.cap.max_inline_data);
  }
}

TEST(ProtectionDomain, QpNumbersAreDistinct) {
  One o;
  QpConfig qc;
  qc.send_cq = qc.recv_cq = &*o.cq;
  auto a = must(o.pd->create_qp(qc), "qp a");
  auto b = must(o.pd->create_qp(qc), "qp b");
  EXPECT_NE(a.qpn(), b.qpn());
}

TEST(ProtectionDomain, QpWithoutCqsIsEinval) {
  One o;
  QpConfig qc;
  qc.send_cq = &*o.cq;
  auto qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EINVAL);
  EXPECT_NE(qp.status().message().find("CQ"), std::string_view::npos);
}

TEST(ProtectionDomain, XrcIsNotSupported) {
  One o;
  QpConfig qc;
  qc.type = QpType::xrc_send;
  qc.send_cq = qc.recv_cq = &*o.cq;
  auto qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EOPNOTSUPP);
  EXPECT_NE(qp.status().message().find("XRC"), std::string_view::npos);
}

TEST(ProtectionDomain, CapsAboveTheDeviceLimitsAreEinval) {
  One o;
  QpConfig qc;
  qc.send_cq = qc.recv_cq = &*o.cq;
  qc.cap.max_send_wr = o.ctx->device_attr().max_qp_wr + 1;
  auto qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EINVAL);
  EXPECT_NE(qp.status().message().find("max_send_wr"), std::string_view::npos) << qp.status().to_string();

  qc.cap = QpConfig{}.cap;
  qc.cap.max_send_sge = o.ctx->device_attr().max_sge + 1;
  qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EINVAL);

  qc.cap = QpConfig{}.cap;
  qc.cap.max_inline_data = o.ctx->device_attr().max_inline + 1;
  qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EINVAL);
}

TEST(ProtectionDomain, CqOfAnotherContextIsEinval) {
  One o;
  Context other = must(Context::open(local_device("127.0.0.2")), "open other");
  auto other_cq = must(other.create_cq(16), "create_cq other");
  QpConfig qc;
  qc.send_cq = &*o.cq;
  qc.recv_cq = &other_cq;
  auto qp = o.pd->create_qp(qc);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(qp.status().code(), EINVAL);
  EXPECT_NE(qp.status().message().find("context"), std::string_view::npos) << qp.status().to_string();
}

TEST(ProtectionDomain, SrqLimitsAreChecked) {
  One o;
  auto s = o.pd->create_srq(SrqConfig{0, 1, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), EINVAL);
  s = o.pd->create_srq(SrqConfig{16, 1, 17});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), EINVAL);
  EXPECT_NE(s.status().message().find("srq_limit"), std::string_view::npos);
}

TEST(ProtectionDomain, AddressHandleChecksItsAttributes) {
  One o;
  AhAttr ah;
  ah.dgid = ip("127.0.0.2");
  ah.is_global = false;
  auto h = o.pd->create_ah(ah);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), EINVAL);
  EXPECT_NE(h.status().message().find("GRH"), std::string_view::npos);

  ah.is_global = true;
  ah.sgid_index = 3;
  h = o.pd->create_ah(ah);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), EINVAL);

  ah.sgid_index = 0;
  ah.dgid = ip("::1");  // IPv6 from an IPv4 GID
  h = o.pd->create_ah(ah);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), EINVAL);
  EXPECT_NE(h.status().message().find("IP version"), std::string_view::npos);
}

TEST(ProtectionDomain, MovedPdKeepsItsChildrenWorking) {
  One o;
  std::vector<std::byte> buf(4096);
  std::optional<MemoryRegion> mr = must(o.pd->reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr");
  ProtectionDomain moved = std::move(*o.pd);
  o.pd.reset();  // the moved-from shell owns nothing
  auto mr2 = must(moved.reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr after move");
  EXPECT_NE(mr->lkey(), mr2.lkey());
  mr.reset();  // children first: mr2 goes before `moved` by scope
}

// Destroying a parent first is a programming error: a debug build asserts;
// a release build warns and leaks the parent so the child stays usable.
TEST(ProtectionDomain, DestroyedBeforeItsChildren) {
  One o;
  std::vector<std::byte> buf(4096);
  std::optional<MemoryRegion> mr = must(o.pd->reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr");
#ifdef NDEBUG
  testing::internal::CaptureStderr();
  o.pd.reset();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ProtectionDomain destroyed while 1 object"), std::string::npos) << err;
  EXPECT_NE(mr->lkey(), 0u);  // still valid
  mr.reset();                 // and destroyable
  testing::internal::CaptureStderr();
  o.cq.reset();
  o.ctx.reset();  // the leaked PD still counts as a child of the context
  EXPECT_NE(testing::internal::GetCapturedStderr().find("Context destroyed while 1 object"), std::string::npos);
#else
  EXPECT_DEATH(o.pd.reset(), "destroy children");
#endif
}

}  // namespace
}  // namespace uroce::apitest
