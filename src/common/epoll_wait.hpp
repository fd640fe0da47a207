// epoll with a nanosecond timeout, on every kernel uroce runs on.
#pragma once

#include <sys/epoll.h>
#include <time.h>

namespace uroce {

// epoll_pwait2() (Linux 5.11+: the timeout in nanoseconds) where the kernel
// has it.  Where it does not, epoll_wait() with the timeout rounded up to
// whole milliseconds: an older kernel says ENOSYS, and a container's seccomp
// profile older than the call says ENOSYS or EPERM.  The first refusal is
// remembered for the process.  `timeout` null: forever.  Returns as
// epoll_wait() does (-1 and errno on error).
int epoll_wait_ns(int epfd, epoll_event* events, int max_events, const timespec* timeout) noexcept;

// Whether the fallback is in use (it is once epoll_pwait2 was refused).
bool epoll_wait_ns_fallback() noexcept;

}  // namespace uroce
