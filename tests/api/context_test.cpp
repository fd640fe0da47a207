// uroce::devices() and uroce::Context.
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

// Sets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    ::setenv(name, value, 1);
  }
  ~EnvGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Devices, OnePerAddressOfUroceAddr) {
  EnvGuard env;
  env.set("UROCE_ADDR", "127.0.0.1,::1");
  env.set("UROCE_PORT", "5000");
  auto devs = must(devices(), "devices");
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "uroce0");
  EXPECT_EQ(devs[1].name, "uroce1");
  ASSERT_EQ(devs[0].gids.size(), 1u);
  EXPECT_EQ(devs[0].gids[0], ip("127.0.0.1"));
  EXPECT_EQ(devs[1].gids[0], ip("::1"));
  EXPECT_EQ(devs[0].udp_port, 5000);
  EXPECT_EQ(devs[1].udp_port, 5000);
}

TEST(Devices, DefaultIsLoopbackOnTheRoceV2Port) {
  EnvGuard env;
  env.set("UROCE_ADDR", "");
  env.set("UROCE_PORT", "");
  auto devs = must(devices(), "devices");
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "uroce0");
  EXPECT_EQ(devs[0].gids[0], ip("127.0.0.1"));
  EXPECT_EQ(devs[0].udp_port, 4791);
}

TEST(Devices, MalformedAddressIsEinvalAndNamed) {
  EnvGuard env;
  env.set("UROCE_ADDR", "127.0.0.1,not-an-ip");
  auto devs = devices();
  ASSERT_FALSE(devs.ok());
  EXPECT_EQ(devs.status().code(), EINVAL);
  EXPECT_NE(devs.status().message().find("not-an-ip"), std::string_view::npos) << devs.status().to_string();
}

TEST(Devices, MalformedPortIsEinval) {
  EnvGuard env;
  env.set("UROCE_PORT", "70000");
  auto devs = devices();
  ASSERT_FALSE(devs.ok());
  EXPECT_EQ(devs.status().code(), EINVAL);
  EXPECT_NE(devs.status().message().find("UROCE_PORT"), std::string_view::npos);
}

TEST(Context, OpenByUnknownNameIsEnodev) {
  EnvGuard env;
  env.set("UROCE_ADDR", "127.0.0.1");
  auto ctx = Context::open("uroce7");
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), ENODEV);
  EXPECT_NE(ctx.status().message().find("uroce7"), std::string_view::npos);
  EXPECT_NE(ctx.status().message().find("uroce0"), std::string_view::npos);  // what exists
}

TEST(Context, OpenByNameFindsTheDeviceOfTheEnvironment) {
  EnvGuard env;
  env.set("UROCE_ADDR", "127.0.0.1,127.0.0.3");
  env.set("UROCE_PORT", "0");
  auto devs = devices();
  // UROCE_PORT=0 is not a port: the environment cannot ask for an ephemeral one.
  ASSERT_FALSE(devs.ok());
  env.set("UROCE_PORT", "47913");
  Context ctx = must(Context::open("uroce1"), "open uroce1");
  EXPECT_EQ(ctx.name(), "uroce1");
  EXPECT_EQ(must(ctx.gid(0), "gid"), ip("127.0.0.3"));
  EXPECT_EQ(ctx.local_endpoint().addr, ip("127.0.0.3"));
}

TEST(Context, AddressNotOfThisHostIsEaddrnotavail) {
  auto ctx = Context::open(local_device("192.0.2.1"));  // TEST-NET-1: never local
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), EADDRNOTAVAIL);
  EXPECT_NE(ctx.status().message().find("192.0.2.1"), std::string_view::npos);
}

TEST(Context, EmptyGidTableIsEinval) {
  DeviceInfo d;
  d.name = "empty";
  auto ctx = Context::open(d);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), EINVAL);
}

TEST(Context, AttributesGidsAndEndpoint) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  EXPECT_EQ(ctx.name(), "api-127.0.0.1");
  EXPECT_EQ(must(ctx.gid(), "gid"), ip("127.0.0.1"));
  auto g1 = ctx.gid(1);
  ASSERT_FALSE(g1.ok());
  EXPECT_EQ(g1.status().code(), EINVAL);
  EXPECT_NE(g1.status().message().find("out of range"), std::string_view::npos);
  // Loopback's MTU is far above 4096: the largest RoCE MTU.
  EXPECT_EQ(ctx.port_attr().active_mtu_bytes, 4096u);
  EXPECT_EQ(ctx.port_attr().active_mtu(), Mtu::m4096);
  EXPECT_EQ(ctx.port_attr().gid_tbl_len, 1u);
  EXPECT_EQ(ctx.info().mtu, 4096u);
  EXPECT_GT(ctx.device_attr().max_qp_wr, 0u);
  EXPECT_GT(ctx.device_attr().max_sge, 0u);
  EXPECT_GT(ctx.device_attr().max_cqe, 0u);
  EXPECT_NE(ctx.device_attr().node_guid, 0u);
  EXPECT_EQ(ctx.local_endpoint().addr, ip("127.0.0.1"));
  EXPECT_NE(ctx.local_endpoint().port, 0);
}

TEST(Context, DeviceMtuLimitsThePort) {
  Context ctx = must(Context::open(local_device("127.0.0.1", 1024)), "open");
  EXPECT_EQ(ctx.port_attr().active_mtu_bytes, 1024u);
  EXPECT_EQ(ctx.port_attr().active_mtu(), Mtu::m1024);
}

TEST(Context, MoveKeepsTheDevice) {
  Context a = must(Context::open(local_device("127.0.0.1")), "open");
  const Endpoint ep = a.local_endpoint();
  Context b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(b);
  EXPECT_EQ(b.local_endpoint(), ep);
  auto pd = must(b.alloc_pd(), "alloc_pd after move");
  EXPECT_TRUE(pd);
}

TEST(Context, CountersAreASnapshotThatCountsTraffic) {
  Pair p;
  const auto before = p.a.ctx->counters();
  ASSERT_FALSE(before.empty());
  std::vector<std::string> names;
  for (const Counter& c : before) names.push_back(c.name);
  for (const char* n : {"tx_packets", "rx_packets", "req_retransmits", "req_acks_rcvd", "resp_acks_sent"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;

  const uint64_t tx0 = must(p.a.ctx->counter("tx_packets"), "tx_packets");
  const uint64_t acks0 = must(p.a.ctx->counter("req_acks_rcvd"), "req_acks_rcvd");
  // 8 KiB with a 4096-byte MTU: two request packets, acknowledged.
  Sge s = p.a.sge(0, 8192);
  must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey())), "post");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
  EXPECT_GE(must(p.a.ctx->counter("tx_packets"), "tx_packets") - tx0, 2u);
  EXPECT_GE(must(p.a.ctx->counter("req_acks_rcvd"), "req_acks_rcvd") - acks0, 1u);
  EXPECT_GE(must(p.b.ctx->counter("resp_acks_sent"), "resp_acks_sent"), 1u);

  auto bad = p.a.ctx->counter("no_such_counter");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ENOENT);
}

// Devices of one host reach each other through shared memory unless told
// not to (DeviceInfo::shared_memory, else UROCE_SHM=0): then through their
// UDP sockets, as to another host.
TEST(Context, SameHostDevicesTalkThroughSharedMemoryUnlessTold) {
  if (const char* e = std::getenv("UROCE_SHM"); e && std::string_view(e) == "0")
    GTEST_SKIP() << "UROCE_SHM=0 in the environment";
  for (const std::optional<bool> shm : {std::optional<bool>{}, std::optional<bool>{false}}) {
    SCOPED_TRACE(shm ? "shared_memory = false" : "default");
    PairOptions o;
    o.shared_memory = shm;
    Pair p(o);
    EXPECT_EQ(p.a.ctx->info().shared_memory, std::optional<bool>(shm.value_or(true)));
    const uint64_t tx0 = must(p.a.ctx->counter("tx_packets"), "tx_packets");
    const uint64_t shm0 = must(p.a.ctx->counter("shm_tx_packets"), "shm_tx_packets");
    Sge s = p.a.sge(0, 8192);  // two packets
    must(p.a.qp->post_send(rdma(WrOpcode::rdma_write, s, p.b.addr(), p.b.mr->rkey())), "post");
    EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);
    const uint64_t sent = must(p.a.ctx->counter("tx_packets"), "tx_packets") - tx0;
    const uint64_t by_shm = must(p.a.ctx->counter("shm_tx_packets"), "shm_tx_packets") - shm0;
    EXPECT_EQ(sent, 2u);
    EXPECT_EQ(by_shm, shm ? 0u : 2u);
    EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data(), 8192), 0);
  }
}

// One NIC per address in a process: a second open that asks for the other
// setting is refused; one that does not say shares the NIC as it is.
TEST(Context, ConflictingSharedMemoryOpensAreRefused) {
  DeviceInfo d = local_device("127.0.0.1");
  d.udp_port = 0;
  d.shared_memory = false;
  Context first = must(Context::open(d), "open");
  EXPECT_EQ(first.info().shared_memory, std::optional<bool>(false));
  DeviceInfo again = d;
  again.shared_memory = true;
  auto r = Context::open(again);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBUSY) << r.status().to_string();
  EXPECT_NE(r.status().to_string().find("without shared memory"), std::string::npos) << r.status().to_string();
  again.shared_memory = false;
  EXPECT_TRUE(Context::open(again).ok());
  again.shared_memory.reset();
  EXPECT_TRUE(Context::open(again).ok());
}

// UROCE_SHM_SLOTS: a bad value fails the open with EINVAL naming it, as the
// other UROCE_* numbers do, but only where shared memory is on.
TEST(Context, BadSharedMemorySlotsFailTheOpen) {
  const char* saved = std::getenv("UROCE_SHM_SLOTS");
  const std::string keep = saved ? saved : "";
  ::setenv("UROCE_SHM_SLOTS", "2048x", 1);
  DeviceInfo d = local_device("127.0.0.4");
  d.udp_port = 0;
  d.shared_memory = true;
  auto bad = Context::open(d);
  d.shared_memory = false;
  auto without = Context::open(d);
  if (saved)
    ::setenv("UROCE_SHM_SLOTS", keep.c_str(), 1);
  else
    ::unsetenv("UROCE_SHM_SLOTS");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), EINVAL);
  EXPECT_NE(bad.status().to_string().find("UROCE_SHM_SLOTS"), std::string::npos) << bad.status().to_string();
  EXPECT_TRUE(without.ok()) << without.status().to_string();
}

TEST(Context, AsyncEventWaitTimesOut) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  const auto t0 = std::chrono::steady_clock::now();
  auto ev = ctx.get_async_event(30);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 25ms);
  EXPECT_GE(ctx.async_fd(), 0);
}

TEST(Version, IsTheProjectVersion) { EXPECT_STREQ(version(), UROCE_PROJECT_VERSION); }

}  // namespace
}  // namespace uroce::apitest
