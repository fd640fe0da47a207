// Completion timestamps through the C ABI: ibv_query_device_ex advertises
// the device clock, ibv_query_rt_values_ex reads it, and a CQ created with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK) stamps every completion
// with it, in order, between readings taken before and after.
#include <time.h>

#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

uint64_t device_now(ibv_context* ctx) {
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  EXPECT_EQ(ibv_query_rt_values_ex(ctx, &v), 0);
  return uint64_t(v.raw_clock.tv_sec) * 1'000'000'000u + uint64_t(v.raw_clock.tv_nsec);
}

uint64_t wall_now() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
}

ibv_cq_ex* stamped_cq(ibv_context* ctx, uint64_t flags) {
  ibv_cq_init_attr_ex a{};
  a.cqe = 64;
  a.wc_flags = IBV_WC_STANDARD_FLAGS | flags;
  return ibv_create_cq_ex(ctx, &a);
}

TEST_F(Verbs, DeviceAdvertisesItsCompletionClock) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_EQ(a.completion_timestamp_mask, ~uint64_t{0});
  EXPECT_EQ(a.hca_core_clock, 1'000'000u) << "kHz: the device clock counts nanoseconds";
  const uint64_t t0 = device_now(ctx_);
  usleep(2000);
  const uint64_t t1 = device_now(ctx_);
  EXPECT_GE(t1 - t0, 2'000'000u) << "2 ms slept";
  EXPECT_LT(t1 - t0, 2'000'000'000u);
  ibv_values_ex bad{};
  bad.comp_mask = 0x80;
  EXPECT_EQ(ibv_query_rt_values_ex(ctx_, &bad), EINVAL);
}

// Ten SENDs to ourselves: each send and receive completion carries a device
// and a wall-clock stamp; stamps grow in completion order and lie between
// the clocks read before posting and after the last poll.
TEST_F(Verbs, CompletionsCarryTimestampsInOrder) {
  ibv_cq_ex* cx = stamped_cq(ctx_, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
  ASSERT_NE(cx, nullptr) << std::strerror(errno);
  ibv_cq* c = ibv_cq_ex_to_cq(cx);
  cqs_.push_back(c);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  const uint64_t dev0 = device_now(ctx_), wall0 = wall_now();
  uint64_t last_dev = 0, last_wall = 0;
  constexpr int kMsgs = 10;
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(post_recv(b, 100 + i, 4096 * (i + 1), 64), 0);
    for (int k = 0; k < 64; ++k) buf_[size_t(k)] = uint8_t(i * 3 + k);
    ASSERT_EQ(post_send_one(a, sge(0, 64), i), 0);
    // One message at a time: the source bytes are rewritten for the next.
    int seen = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (seen < 2 && Clock::now() < deadline) {
      ibv_poll_cq_attr pa{};
      if (ibv_start_poll(cx, &pa) != 0) continue;
      do {
        ASSERT_EQ(cx->status, IBV_WC_SUCCESS);
        const uint64_t dev = ibv_wc_read_completion_ts(cx), wall = ibv_wc_read_completion_wallclock_ns(cx);
        EXPECT_GE(dev, dev0);
        EXPECT_GE(wall, wall0);
        EXPECT_GE(dev, last_dev) << "device stamps in completion order";
        EXPECT_GE(wall + 1'000'000, last_wall) << "wall-clock stamps in order (1 ms for a clock step)";
        last_dev = dev;
        last_wall = wall;
        ++seen;
      } while (ibv_next_poll(cx) == 0);
      ibv_end_poll(cx);
    }
    ASSERT_EQ(seen, 2) << "message " << i;
    ASSERT_EQ(std::memcmp(buf_.data() + 4096 * (i + 1), buf_.data(), 64), 0);
  }
  const uint64_t dev1 = device_now(ctx_), wall1 = wall_now();
  EXPECT_GT(dev1, dev0);
  EXPECT_GT(wall1, wall0);
}

// The stamp is taken when the completion is queued, not when it is polled;
// a resize keeps stamps with their completions.
TEST_F(Verbs, StampsAreTakenWhenCompletionsAreQueued) {
  ibv_cq_ex* cx = stamped_cq(ctx_, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
  ASSERT_NE(cx, nullptr) << std::strerror(errno);
  ibv_cq* c = ibv_cq_ex_to_cq(cx);
  cqs_.push_back(c);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ASSERT_EQ(post_recv(b, 7, 8192, 64), 0);
  ASSERT_EQ(post_send_one(a, sge(0, 64), 1), 0);
  // Nobody polls: the NIC's progress thread carries the exchange and queues
  // both completions meanwhile (polling would drive the NIC in this thread).
  usleep(200'000);
  ASSERT_EQ(ibv_resize_cq(c, 128), 0);
  const uint64_t polled_at = device_now(ctx_);
  std::vector<uint64_t> stamps;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  ibv_poll_cq_attr pa{};
  while (stamps.size() < 2 && Clock::now() < deadline) {
    if (ibv_start_poll(cx, &pa) != 0) continue;
    do {
      EXPECT_EQ(cx->status, IBV_WC_SUCCESS);
      stamps.push_back(ibv_wc_read_completion_ts(cx));
    } while (ibv_next_poll(cx) == 0);
    ibv_end_poll(cx);
  }
  ASSERT_EQ(stamps.size(), 2u);
  EXPECT_LE(stamps[0], stamps[1]);
  EXPECT_LT(stamps[1], polled_at) << "stamped when queued (before the resize and the poll), not when polled";
}

TEST_F(Verbs, AnUnstampedCqStillRefusesUnknownWcFlags) {
  ibv_cq_init_attr_ex a{};
  a.cqe = 8;
  a.wc_flags = IBV_WC_EX_WITH_CVLAN;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

}  // namespace
}  // namespace compat_test
