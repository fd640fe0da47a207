#include "common/thread_tuning.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <thread>

namespace uroce {
namespace {

struct Attr {  // the kernel's struct sched_attr, version 0
  uint32_t size;
  uint32_t policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime;
  uint64_t deadline;
  uint64_t period;
};

Attr self_attr() {
  Attr a{};
  EXPECT_EQ(::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0), 0);
  return a;
}

TEST(ThreadTuning, ShortSliceKeepsPolicyAndNiceAndTouchesOnlyThisThread) {
  Attr probe{};
  if (::syscall(SYS_sched_getattr, 0, &probe, sizeof probe, 0) != 0) GTEST_SKIP() << "no sched_getattr here";
  const Attr main_before = self_attr();
  const int nice = std::min(main_before.nice + 1, 19);  // raising it needs no privilege
  Attr before{}, after{};
  bool granted = false;
  std::thread t([&] {
    // A nice value of our own, as an application might have given us.
    ASSERT_EQ(::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice), 0);
    before = self_attr();
    granted = request_short_slice(200'000);
    after = self_attr();
  });
  t.join();
  EXPECT_EQ(after.policy, before.policy);
  EXPECT_EQ(after.nice, nice);
  if (granted)
    EXPECT_EQ(after.runtime, 200'000u);
  else
    EXPECT_EQ(after.runtime, before.runtime) << "refused, yet the slice changed";
  const Attr main_after = self_attr();
  EXPECT_EQ(main_after.runtime, main_before.runtime);
  EXPECT_EQ(main_after.nice, main_before.nice);
}

TEST(ThreadTuning, TimerSlackIsPerThread) {
  const long main_before = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  long in_thread = -1;
  std::thread t([&] {
    set_timer_slack(1'000);
    in_thread = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  });
  t.join();
  EXPECT_EQ(in_thread, 1'000);
  EXPECT_EQ(::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), main_before);
}

}  // namespace
}  // namespace uroce
