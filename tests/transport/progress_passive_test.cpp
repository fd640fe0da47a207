// The progress thread of a passive server (an application that never polls:
// ib_read_lat's server, the seed's passive agent): it serves each request,
// then keeps looking for a while rather than sleep, so that the next
// request of a latency test finds it awake (LookPolicy::kPassiveSpinNs);
// once requests stop it sleeps, and idle it uses no CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loopback.hpp"

namespace uroce::test {
namespace {

using transport::Counters;

uint64_t cpu_us(Side& s) {
  const auto c = s.ctx->nic().progress_cpu();
  return c.user_us + c.system_us;
}

class ProgressPassive : public ::testing::TestWithParam<PacketPath> {};

TEST_P(ProgressPassive, ThreadStaysAwakeBetweenRequestsThenSleeps) {
  Pair p(over(GetParam()));
  fill_pattern(p.b.buf.data(), 1 << 16, 7);
  constexpr uint32_t kReads = 400;
  constexpr uint32_t kLen = 64;
  for (uint32_t i = 0; i < kReads; ++i) {
    const size_t off = (i * 131u) % ((1 << 16) - kLen);
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::rdma_read;
    wr.send_flags = send_flags::kSignaled;
    Sge sge = p.a.sge(off, kLen);
    wr.sg_list = {&sge, 1};
    wr.remote_addr = p.b.addr(off);
    wr.rkey = p.b.mr->rkey();
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    const auto wc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    ASSERT_EQ(wc[0].status, WcStatus::success);
    ASSERT_EQ(wc[0].wr_id, i);
    ASSERT_EQ(wc[0].byte_len, kLen);
    ASSERT_EQ(first_diff(p.a.buf.data() + off, p.b.buf.data() + off, kLen), -1) << "read " << i;
  }
  const Counters c = p.b.counters();
  // Nobody on B polls: its thread took every request.  Most came while it
  // was still looking after the one before (each READ's turn-around is a
  // few microseconds; the spin lasts 20): none would without the spin, as
  // it slept in the socket after each.  A host too busy to give either side
  // a CPU in time leaves fewer; a quarter is far below what it does idle.
  EXPECT_GE(c.thread_rx_packets, kReads);
  EXPECT_GE(c.thread_spin_rx * 4, uint64_t(kReads))
      << c.thread_spin_rx << " of " << c.thread_rx_packets << " packets found awake; " << c.thread_socket_wakes
      << " socket wakes";
  EXPECT_LE(c.thread_spin_rx, c.thread_rx_packets);

  // Requests stopped: the spin ends, and the idle thread sleeps.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const uint64_t b0 = cpu_us(p.b);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(cpu_us(p.b) - b0, 30'000u);
}

// An application that polls its CQ drives progress itself: its thread
// takes nothing and never spins (it would take the CPU the application
// polls on).
TEST_P(ProgressPassive, ThreadOfAPollingApplicationDoesNotSpin) {
  Pair p(over(GetParam()));
  fill_pattern(p.b.buf.data(), 4096, 3);
  for (uint32_t i = 0; i < 100; ++i) {
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::rdma_read;
    wr.send_flags = send_flags::kSignaled;
    Sge sge = p.a.sge(0, 256);
    wr.sg_list = {&sge, 1};
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    // B polls (its CQ stays empty) while A waits for the READ.
    Wc wc[1];
    size_t got = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got == 0 && std::chrono::steady_clock::now() < until) {
      ASSERT_EQ(*p.b.scq->poll(wc), 0u);
      const auto r = p.a.scq->poll(wc);
      ASSERT_TRUE(r.ok());
      got = *r;
    }
    ASSERT_EQ(got, 1u);
    ASSERT_EQ(wc[0].status, WcStatus::success);
    ASSERT_EQ(wc[0].wr_id, i);
  }
  ASSERT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 256), -1);
  const Counters c = p.b.counters();
  EXPECT_EQ(c.thread_spin_rx, 0u) << c.thread_rx_packets << " packets taken by the thread";
}

INSTANTIATE_TEST_SUITE_P(, ProgressPassive, ::testing::Values(PacketPath::udp, PacketPath::shm), PacketPathName);

}  // namespace
}  // namespace uroce::test
