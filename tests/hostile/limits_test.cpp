// Resource limits are enforced with errors that say which limit: QPs per
// process, memory regions per process, CQ entries, READ/atomic depths.
// (Outstanding READs/atomics beyond max_dest_rd_atomic from a peer: see
// hostile_test.cpp.)  Each test runs in a process of its own (ctest), so
// exhausting the process-wide tables here harms nobody.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "net/fake_io.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"

namespace uroce::test {
namespace {

using namespace uroce::verbs;

struct Device {
  std::shared_ptr<net::FakeNetwork> net = net::FakeNetwork::create();
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  Device() {
    DeviceConfig cfg;
    cfg.name = "limits";
    cfg.gids = {*IpAddr::parse("10.0.0.9")};
    cfg.faults = FaultConfig{};
    auto n = net;
    cfg.io_factory = [n]() -> Result<std::unique_ptr<net::PacketIo>> {
      auto io = n->attach({*IpAddr::parse("10.0.0.9"), 4791});
      if (!io.ok()) return io.status();
      return std::unique_ptr<net::PacketIo>(std::move(*io));
    };
    ctx = std::move(Context::open(cfg).value());
    pd = verbs::Pd::create(*ctx).value();
    cq = std::move(Cq::create(*ctx, 16, nullptr).value());
  }
  Result<std::unique_ptr<Qp>> qp(QpCap cap = QpCap{1, 1, 1, 1, 0}) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap = cap;
    return Qp::create(*pd, init);
  }
};

TEST(Limits, QpsPerProcess) {
  Device d;
  std::vector<std::unique_ptr<Qp>> qps;
  Status last;
  for (int i = 0; i < 20000; ++i) {
    auto q = d.qp();
    if (!q.ok()) {
      last = q.status();
      break;
    }
    qps.push_back(std::move(*q));
  }
  EXPECT_EQ(qps.size(), 16382u) << "QP indexes 2..16383 of this process's QPN space";
  EXPECT_EQ(last.code(), ENOMEM);
  EXPECT_NE(last.to_string().find("no free QP number"), std::string::npos) << last.to_string();
  EXPECT_NE(last.to_string().find("16382 QPs per process"), std::string::npos) << last.to_string();
  // A QP destroyed gives its number back.
  qps.pop_back();
  auto again = d.qp();
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  qps.clear();
}

TEST(Limits, MemoryRegionsPerProcess) {
  Device d;
  static char page[4096];
  std::vector<std::unique_ptr<Mr>> mrs;
  Status last;
  for (uint32_t i = 0; i < MrTable::kMaxMrs + 10; ++i) {
    auto m = Mr::reg(*d.pd, uint64_t(uintptr_t(page)), sizeof page, uint64_t(uintptr_t(page)), access::kLocalWrite);
    if (!m.ok()) {
      last = m.status();
      break;
    }
    mrs.push_back(std::move(*m));
  }
  EXPECT_EQ(mrs.size(), size_t(MrTable::kMaxMrs - 1)) << "index 0 is never used";
  EXPECT_EQ(last.code(), ENOMEM);
  EXPECT_NE(last.to_string().find("memory region table full"), std::string::npos) << last.to_string();
  EXPECT_EQ(d.ctx->device_attr().max_mr, MrTable::kMaxMrs - 1) << "what the device reports is what it enforces";
  mrs.pop_back();
  EXPECT_TRUE(
      Mr::reg(*d.pd, uint64_t(uintptr_t(page)), sizeof page, uint64_t(uintptr_t(page)), access::kLocalWrite).ok());
  mrs.clear();
}

TEST(Limits, CompletionQueueEntriesAndQueueSizes) {
  Device d;
  auto big = Cq::create(*d.ctx, Cq::kMaxCqe + 1, nullptr);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), EINVAL);
  EXPECT_NE(big.status().to_string().find(std::to_string(Cq::kMaxCqe)), std::string::npos) << big.status().to_string();
  EXPECT_EQ(Cq::create(*d.ctx, 0, nullptr).status().code(), EINVAL);
  EXPECT_EQ(d.ctx->device_attr().max_cqe, Cq::kMaxCqe);
  auto q = d.qp(QpCap{Qp::kMaxWr + 1, 1, 1, 1, 0});
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), EINVAL);
  EXPECT_NE(q.status().to_string().find("max_send_wr"), std::string::npos) << q.status().to_string();
  EXPECT_EQ(d.qp(QpCap{1, 1, Qp::kMaxSge + 1, 1, 0}).status().code(), EINVAL);
  EXPECT_EQ(d.qp(QpCap{1, 1, 1, 1, Qp::kMaxInline + 1}).status().code(), EINVAL);
}

TEST(Limits, ReadAndAtomicDepths) {
  Device d;
  auto q = d.qp();
  ASSERT_TRUE(q.ok());
  namespace m = qp_attr_mask;
  QpAttr a;
  a.qp_state = QpState::init;
  a.qp_access_flags = access::kRemoteRead;
  ASSERT_TRUE((*q)->modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags).ok());
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  a.path_mtu = Mtu::m1024;
  a.dest_qp_num = 0x777;
  a.rq_psn = 1;
  a.ah_attr.dgid = *IpAddr::parse("10.0.0.1");
  a.ah_attr.is_global = true;
  a.max_dest_rd_atomic = Qp::kMaxRdAtomic + 1;
  a.min_rnr_timer = 1;
  const uint32_t rtr_mask =
      m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic | m::kMinRnrTimer;
  Status s = (*q)->modify(a, rtr_mask);
  EXPECT_EQ(s.code(), EINVAL);
  EXPECT_NE(s.to_string().find("max_dest_rd_atomic above " + std::to_string(Qp::kMaxRdAtomic)), std::string::npos)
      << s.to_string();
  a.max_dest_rd_atomic = Qp::kMaxRdAtomic;
  s = (*q)->modify(a, rtr_mask);
  ASSERT_TRUE(s.ok()) << s.to_string();
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.max_rd_atomic = Qp::kMaxRdAtomic + 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  s = (*q)->modify(a, m::kState | m::kSqPsn | m::kMaxQpRdAtomic | m::kTimeout | m::kRetryCnt | m::kRnrRetry);
  EXPECT_EQ(s.code(), EINVAL);
  EXPECT_NE(s.to_string().find("max_rd_atomic above"), std::string::npos) << s.to_string();
  EXPECT_EQ(d.ctx->device_attr().max_qp_rd_atom, Qp::kMaxRdAtomic);
}

}  // namespace
}  // namespace uroce::test
