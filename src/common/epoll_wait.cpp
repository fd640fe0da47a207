#include "common/epoll_wait.hpp"

#include <errno.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace uroce {

namespace {

std::atomic<bool> g_no_pwait2{false};

// The timeout in whole milliseconds, rounded up (never a wait shorter than
// asked, so a timer is never found not yet due), -1 for forever.
int to_ms(const timespec* t) noexcept {
  if (t == nullptr) return -1;
  const uint64_t ns = uint64_t(t->tv_sec) * 1'000'000'000u + uint64_t(t->tv_nsec);
  const uint64_t ms = (ns + 999'999) / 1'000'000;
  return ms > uint64_t(INT_MAX) ? INT_MAX : int(ms);
}

}  // namespace

int epoll_wait_ns(int epfd, epoll_event* events, int max_events, const timespec* timeout) noexcept {
  if (!g_no_pwait2.load(std::memory_order_relaxed)) {
    const int n = ::epoll_pwait2(epfd, events, max_events, timeout, nullptr);
    if (n >= 0 || (errno != ENOSYS && errno != EPERM)) return n;
    g_no_pwait2.store(true, std::memory_order_relaxed);
  }
  return ::epoll_wait(epfd, events, max_events, to_ms(timeout));
}

bool epoll_wait_ns_fallback() noexcept { return g_no_pwait2.load(std::memory_order_relaxed); }

}  // namespace uroce
