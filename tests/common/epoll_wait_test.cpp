// epoll_wait_ns where the kernel (or a container's seccomp profile) has no
// epoll_pwait2: the same results, the timeout rounded up to milliseconds.
#include "common/epoll_wait.hpp"

#include <errno.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "support/deny_syscall.hpp"

namespace uroce {
namespace {

using Clock = std::chrono::steady_clock;

struct Fds {
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  int ev = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Fds() {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = 7;
    EXPECT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e), 0);
  }
  ~Fds() {
    ::close(ev);
    ::close(ep);
  }
};

// The same checks with and without the system call.
void check_waits(bool expect_fallback) {
  Fds f;
  epoll_event out[2];
  const timespec zero{};
  EXPECT_EQ(epoll_wait_ns(f.ep, out, 2, &zero), 0);
  EXPECT_EQ(epoll_wait_ns_fallback(), expect_fallback);

  // A timeout below a millisecond still waits at least as long as asked.
  for (long ns : {300'000L, 2'500'000L}) {
    const timespec t{0, ns};
    const auto t0 = Clock::now();
    EXPECT_EQ(epoll_wait_ns(f.ep, out, 2, &t), 0);
    EXPECT_GE(Clock::now() - t0, std::chrono::nanoseconds(ns));
  }

  const uint64_t one = 1;
  ASSERT_EQ(::write(f.ev, &one, sizeof one), ssize_t(sizeof one));
  ASSERT_EQ(epoll_wait_ns(f.ep, out, 2, nullptr), 1);  // forever, but ready
  EXPECT_EQ(out[0].data.u32, 7u);
  const timespec long_wait{5, 0};
  const auto t0 = Clock::now();
  EXPECT_EQ(epoll_wait_ns(f.ep, out, 2, &long_wait), 1);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));

  errno = 0;
  EXPECT_EQ(epoll_wait_ns(-1, out, 2, &zero), -1);  // other errors are the caller's
  EXPECT_EQ(errno, EBADF);
}

// Each test runs in its own process (ctest), so the remembered fallback of
// one does not leak into the next.
TEST(EpollWaitNs, WithEpollPwait2) {
  Fds f;
  epoll_event out[1];
  const timespec zero{};
  if (::syscall(SYS_epoll_pwait2, f.ep, out, 1, &zero, nullptr, 8) != 0) GTEST_SKIP() << "no epoll_pwait2 here";
  check_waits(false);
}

TEST(EpollWaitNs, KernelWithoutEpollPwait2) {
  ASSERT_TRUE(test::with_syscall_denied(SYS_epoll_pwait2, ENOSYS, [] { check_waits(true); }));
}

TEST(EpollWaitNs, SeccompProfileThatRefusesEpollPwait2) {
  ASSERT_TRUE(test::with_syscall_denied(SYS_epoll_pwait2, EPERM, [] { check_waits(true); }));
}

}  // namespace
}  // namespace uroce
