// The soak through the drop-in libibverbs.so.1 (src/compat): the same
// engine, the devices opened and driven with <infiniband/verbs.h> only, the
// faults from UROCE_FAULTS (what a user of an unmodified verbs program sets).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "side_ibverbs.hpp"
#include "soak.hpp"

namespace uroce::soak {
namespace {

class SoakIbverbs : public ::testing::TestWithParam<const char*> {};

TEST_P(SoakIbverbs, EveryByteOnceUnderLoss) {
  // Two devices of this process: uroce0 and uroce1 (ctest sets UROCE_ADDR).
  ::setenv("UROCE_FAULTS", GetParam(), 1);
  auto a = open_ibverbs_side("uroce0");
  auto b = open_ibverbs_side("uroce1");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Options o;
  const char* mib = std::getenv("UROCE_SOAK_MIB");
  o.bytes_per_qp = uint64_t(mib && *mib ? std::strtoull(mib, nullptr, 10) : 4) << 20;
  o.qp.timeout = 14;
  o.time_limit = std::chrono::seconds(60);
  const Report r = run_in_process(**a, **b, o);
  std::printf("  %s: %s\n", GetParam(), r.summary().c_str());
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_GE(r.totals.bytes, uint64_t(o.qps) * o.bytes_per_qp);
  EXPECT_EQ(r.sends_checked, r.totals.sends);
}

INSTANTIATE_TEST_SUITE_P(Faults, SoakIbverbs,
                         ::testing::Values("seed=21,drop=0.01,dup=0.01,reorder=0.01:8",
                                           "seed=22,drop=0.05,dup=0.01,reorder=0.01:8",
                                           "seed=23,drop=0.2,dup=0.01,reorder=0.01:8"),
                         [](const auto& info) { return "Rate" + std::to_string(info.index); });

}  // namespace
}  // namespace uroce::soak
