// Device-wide object limits (max_pd, max_cq, max_srq, max_ah) are the
// core's: counted per device, shared by its contexts, ENOMEM beyond the limit
// query_device reports, given back when an object goes.
#include "verbs/resources.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "net/fake_io.hpp"
#include "verbs/ah.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/pd.hpp"
#include "verbs/srq.hpp"

namespace uroce::verbs {
namespace {

TEST(DeviceResources, TakesUpToTheLimitThenFailsWithEnomem) {
  DeviceAttr limits;
  limits.max_pd = 2;
  limits.max_ah = 1;
  auto res = std::make_shared<DeviceResources>(limits);
  auto a = res->take(Resource::pd);
  auto b = res->take(Resource::pd);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(res->in_use(Resource::pd), 2u);
  auto c = res->take(Resource::pd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ENOMEM);
  EXPECT_EQ(c.status().message(), "max_pd (2) protection domains exist on this device");
  // Kinds are counted apart.
  EXPECT_TRUE(res->take(Resource::ah).ok());  // taken and given back at once
  EXPECT_EQ(res->in_use(Resource::ah), 0u);
  // A moved hold counts once; destroying it gives its place back.
  ResourceHold moved = std::move(*a);
  EXPECT_EQ(res->in_use(Resource::pd), 2u);
  { ResourceHold gone = std::move(moved); }
  EXPECT_EQ(res->in_use(Resource::pd), 1u);
  EXPECT_TRUE(res->take(Resource::pd).ok());
}

DeviceConfig fake_device(const char* addr) {
  DeviceConfig cfg;
  cfg.name = "res-test";
  cfg.gids.push_back(*IpAddr::parse(addr));
  auto net = net::FakeNetwork::create();
  cfg.io_factory = [net, addr]() -> Result<std::unique_ptr<net::PacketIo>> {
    auto io = net->attach({*IpAddr::parse(addr), 0});
    if (!io.ok()) return io.status();
    return std::unique_ptr<net::PacketIo>(std::move(*io));
  };
  return cfg;
}

TEST(DeviceResources, CompletionQueuesStopAtMaxCqAndComeBack) {
  auto ctx = Context::open(fake_device("10.7.8.1"));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const uint32_t max = (*ctx)->device_attr().max_cq;
  std::vector<std::unique_ptr<Cq>> cqs;
  cqs.reserve(max);
  for (uint32_t i = 0; i < max; ++i) {
    auto cq = Cq::create(**ctx, 1, nullptr);
    ASSERT_TRUE(cq.ok()) << i << ": " << cq.status().to_string();
    cqs.push_back(std::move(*cq));
  }
  auto over = Cq::create(**ctx, 1, nullptr);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), ENOMEM);
  EXPECT_EQ((*ctx)->users().load(), int(max));
  cqs.pop_back();
  EXPECT_TRUE(Cq::create(**ctx, 1, nullptr).ok());
  cqs.clear();
  EXPECT_EQ((*ctx)->resources().in_use(Resource::cq), 0u);
  EXPECT_EQ((*ctx)->users().load(), 0);
}

TEST(DeviceResources, EveryObjectKindIsCountedAndGivenBack) {
  auto ctx = Context::open(fake_device("10.7.8.2"));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  DeviceResources& res = (*ctx)->resources();
  {
    auto pd = Pd::create(**ctx);
    ASSERT_TRUE(pd.ok());
    auto cq = Cq::create(**ctx, 4, nullptr);
    ASSERT_TRUE(cq.ok());
    auto srq = Srq::create(**pd, SrqAttr{4, 1, 0});
    ASSERT_TRUE(srq.ok()) << srq.status().to_string();
    AhAttr a;
    a.is_global = true;
    a.dgid = *IpAddr::parse("10.7.8.3");
    auto ah = Ah::create(**pd, a);
    ASSERT_TRUE(ah.ok()) << ah.status().to_string();
    EXPECT_EQ(res.in_use(Resource::pd), 1u);
    EXPECT_EQ(res.in_use(Resource::cq), 1u);
    EXPECT_EQ(res.in_use(Resource::srq), 1u);
    EXPECT_EQ(res.in_use(Resource::ah), 1u);
    EXPECT_EQ((*ctx)->users().load(), 2);  // the PD and the CQ
  }
  for (auto r : {Resource::pd, Resource::cq, Resource::srq, Resource::ah}) EXPECT_EQ(res.in_use(r), 0u) << to_string(r);
  EXPECT_EQ((*ctx)->users().load(), 0);
}

// Contexts of one device (one NIC: same address and port) count together,
// as query_device's limits are the device's.
TEST(DeviceResources, ContextsOfOneDeviceShareTheCounts) {
  DeviceConfig cfg;
  cfg.name = "res-shared";
  cfg.gids.push_back(*IpAddr::parse("127.0.84.1"));
  auto a = Context::open(cfg);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = Context::open(cfg);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(&(*a)->nic(), &(*b)->nic());
  EXPECT_EQ(&(*a)->resources(), &(*b)->resources());
  auto pa = Pd::create(**a);
  auto pb = Pd::create(**b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ((*a)->resources().in_use(Resource::pd), 2u);
  EXPECT_EQ((*a)->users().load(), 1);  // each context counts its own children
  EXPECT_EQ((*b)->users().load(), 1);
}

}  // namespace
}  // namespace uroce::verbs
