#include "common/thread_tuning.hpp"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace uroce {
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h); glibc
// 2.36 has no wrapper for these two calls.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};
constexpr uint32_t kSchedAttrSizeVer0 = 48;
constexpr uint64_t kResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

}  // namespace

bool request_short_slice(uint64_t ns) noexcept {
#if defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
  SchedAttr attr{};
  if (::syscall(SYS_sched_getattr, 0, &attr, kSchedAttrSizeVer0, 0) != 0) return false;
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return false;
  attr.size = kSchedAttrSizeVer0;
  attr.sched_flags &= kResetOnFork;  // kept as it was; nothing else asked
  attr.sched_runtime = ns;
  if (::syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return false;
  // Kernels before custom slices accept the call and ignore the runtime.
  SchedAttr now{};
  if (::syscall(SYS_sched_getattr, 0, &now, kSchedAttrSizeVer0, 0) != 0) return false;
  return now.sched_runtime == ns;
#else
  (void)ns;
  return false;
#endif
}

void set_timer_slack(uint64_t ns) noexcept {
  (void)::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(ns), 0, 0, 0);
}

}  // namespace uroce
