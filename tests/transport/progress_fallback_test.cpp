// The progress thread on a kernel without epoll_pwait2 (before 5.11), or in
// a container whose seccomp profile predates it: it still sleeps while idle
// and still wakes for the packets only it can land.
#include <errno.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/epoll_wait.hpp"
#include "loopback.hpp"
#include "support/deny_syscall.hpp"

namespace uroce::test {
namespace {

uint64_t cpu_us(Side& s) {
  const auto c = s.ctx->nic().progress_cpu();
  return c.user_us + c.system_us;
}

class ProgressFallback : public ::testing::TestWithParam<int> {};

TEST_P(ProgressFallback, ThreadSleepsWhenIdleAndLandsWrites) {
  bool ran = false;
  // The NICs' threads are made on the denied thread, so they inherit it.
  ASSERT_TRUE(with_syscall_denied(SYS_epoll_pwait2, GetParam(), [&] {
    Pair p;
    // A's WRITEs land in B's buffer, and are acknowledged, by B's progress
    // thread alone: nobody on B polls.
    for (uint32_t i = 0; i < 20; ++i) {
      const size_t off = 4096 * i;
      fill_pattern(p.a.buf.data() + off, 4096, i);
      SendWr wr;
      wr.wr_id = i;
      wr.opcode = WrOpcode::rdma_write;
      wr.send_flags = send_flags::kSignaled;
      Sge sge = p.a.sge(off, 4096);
      wr.sg_list = {&sge, 1};
      wr.remote_addr = p.b.addr(off);
      wr.rkey = p.b.mr->rkey();
      ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
      auto wc = poll_n(*p.a.scq, 1);
      ASSERT_EQ(wc.size(), 1u);
      ASSERT_EQ(wc[0].status, WcStatus::success);
      ASSERT_EQ(wc[0].wr_id, i);
      std::lock_guard g(p.b.ctx->nic().mu());
      ASSERT_EQ(first_diff(p.a.buf.data() + off, p.b.buf.data() + off, 4096), -1);
    }
    EXPECT_TRUE(epoll_wait_ns_fallback());

    // Idle: each thread sleeps until its next timer (a spin on a refused
    // call would burn the whole 400 ms).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t a0 = cpu_us(p.a), b0 = cpu_us(p.b);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_LT(cpu_us(p.a) - a0, 40'000u);
    EXPECT_LT(cpu_us(p.b) - b0, 40'000u);
    ran = true;
  }));
  EXPECT_TRUE(ran);
}

INSTANTIATE_TEST_SUITE_P(, ProgressFallback, ::testing::Values(ENOSYS, EPERM),
                         [](const auto& i) { return std::string(i.param == ENOSYS ? "ENOSYS" : "EPERM"); });

}  // namespace
}  // namespace uroce::test
