// Soak tests, CI size: 4 RC QPs doing WRITE, READ, SEND, FETCH_AND_ADD and
// CMP_AND_SWP, byte-exact and exactly once, at 1%, 5% and 20% injected drop
// with duplication and reordering, over the in-memory network (core verbs)
// and over UDP on loopback (the public C++ API).  UROCE_SOAK_MIB sets the
// bytes per QP (default 8); the full soak is `soak --gib 1` (docs/faults.md).
#include "soak.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "net/fake_io.hpp"

namespace uroce::soak {
namespace {

uint64_t mib_per_qp(uint64_t dflt) {
  const char* e = std::getenv("UROCE_SOAK_MIB");
  return (e && *e ? std::strtoull(e, nullptr, 10) : dflt) << 20;
}

FaultConfig faults(double drop, uint64_t seed, const char* extra = "") {
  char spec[256];
  std::snprintf(spec, sizeof spec, "seed=%llu,drop=%g,dup=0.01,reorder=0.01:8%s%s",
                static_cast<unsigned long long>(seed), drop, *extra ? "," : "", extra);
  auto c = parse_faults(spec);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

void expect_sound(const Report& r, const Options& o) {
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_GE(r.totals.bytes, uint64_t(o.qps) * o.bytes_per_qp);
  EXPECT_EQ(r.sends_checked, r.totals.sends);
  std::printf("  %s\n", r.summary().c_str());
}

struct Case {
  double drop;
  const char* extra;
};

class SoakFake : public ::testing::TestWithParam<Case> {};

TEST_P(SoakFake, EveryByteOnceUnderLoss) {
  const Case c = GetParam();
  Options o;
  o.bytes_per_qp = mib_per_qp(8);
  o.seed = 11;
  o.qp.timeout = 14;  // 67 ms: a sanitizer build on a busy CI machine stalls threads for long
  o.time_limit = std::chrono::seconds(60);
  auto net = net::FakeNetwork::create();
  net->set_queue_limit(1 << 16);
  auto a = open_fake_side(net, "10.0.0.1", faults(c.drop, 1, c.extra));
  auto b = open_fake_side(net, "10.0.0.2", faults(c.drop, 2, c.extra));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const Report r = run_in_process(**a, **b, o);
  expect_sound(r, o);
  EXPECT_GT(counter(r.client_counters, "fault_tx_dropped"), 0u);
  EXPECT_GT(counter(r.server_counters, "fault_tx_dropped"), 0u);
  EXPECT_GT(counter(r.client_counters, "req_retransmits"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rates, SoakFake,
                         ::testing::Values(Case{0.01, ""}, Case{0.05, ""}, Case{0.20, ""},
                                           // delay and corruption (caught by the ICRC), both directions
                                           Case{0.02, "delay=0.01:300us,corrupt=0.0005,dir=both"}),
                         [](const auto& info) {
                           return "Drop" + std::to_string(int(info.param.drop * 100)) +
                                  (*info.param.extra ? "DelayCorruptBothDirections" : "");
                         });

class SoakUdp : public ::testing::TestWithParam<double> {};

TEST_P(SoakUdp, EveryByteOnceUnderLoss) {
  const double drop = GetParam();
  Options o;
  o.bytes_per_qp = mib_per_qp(4);
  o.seed = 12;
  o.qp.timeout = 14;
  o.time_limit = std::chrono::seconds(60);
  DeviceInfo da{.name = "soak-a", .gids = {*IpAddr::parse("127.0.0.1")}, .udp_port = 0};
  DeviceInfo db{.name = "soak-b", .gids = {*IpAddr::parse("127.0.0.2")}, .udp_port = 0};
  da.faults = faults(drop, 3);
  db.faults = faults(drop, 4);
  auto a = open_api_side(da);
  auto b = open_api_side(db);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const Report r = run_in_process(**a, **b, o);
  expect_sound(r, o);
  EXPECT_GT(counter(r.client_counters, "fault_tx_dropped"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rates, SoakUdp, ::testing::Values(0.01, 0.05, 0.20),
                         [](const auto& info) { return "Drop" + std::to_string(int(info.param * 100)); });

// No faults at all: the baseline the others are compared with.
TEST(SoakBaseline, CleanNetwork) {
  Options o;
  o.bytes_per_qp = mib_per_qp(8);
  auto net = net::FakeNetwork::create();
  auto a = open_fake_side(net, "10.0.0.1", std::nullopt);
  auto b = open_fake_side(net, "10.0.0.2", std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  const Report r = run_in_process(**a, **b, o);
  expect_sound(r, o);
  // (A timeout may still fire when the machine stalls us for 4 ms: not asserted.)
  EXPECT_EQ(counter(r.server_counters, "resp_seq_naks_sent"), 0u);
  EXPECT_EQ(counter(r.client_counters, "fault_tx_dropped"), 0u);
}

}  // namespace
}  // namespace uroce::soak
