// The progress thread's tick beside an application thread inside the NIC:
// one that polled since the last look and holds the NIC lock right now is
// driving the protocol itself, so the tick goes back to sleep rather than
// wait for the lock (which would cost the poller a futex wake and its CPU
// two switches).  One that holds the lock without polling is waited for.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loopback.hpp"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;

// For `total`: one empty poll of `s`'s send CQ (a drive, when `poll`),
// then the NIC lock held for `hold`, as a poller inside drive() holds it.
void hold_the_nic(Side& s, bool poll, std::chrono::milliseconds total, std::chrono::milliseconds hold) {
  const auto end = std::chrono::steady_clock::now() + total;
  while (std::chrono::steady_clock::now() < end) {
    if (poll) {
      Wc wc[1];
      ASSERT_TRUE(s.scq->poll(std::span<Wc>(wc, 1)).ok());
    }
    {
      std::lock_guard g(s.ctx->nic().mu());
      std::this_thread::sleep_for(hold);
    }
    std::this_thread::sleep_for(50us);  // a moment for a waiting look to take the lock
  }
}

// Starts A's thread ticking: A polls once, then a SEND from B wakes A's
// thread (its socket armed while A was idle), whose look sees that poll.
// (Counters are read under the lock, which is no poll.)
void start_ticking(Pair& p) {
  std::this_thread::sleep_for(20ms);  // the thread's look after the set-up's polls
  ASSERT_TRUE(post_recv(*p.a.qp, 1, {p.a.sge(0, 64)}).ok());
  Wc wc[1];
  ASSERT_TRUE(p.a.scq->poll(std::span<Wc>(wc, 1)).ok());
  const uint64_t served = p.a.counters().thread_rx_packets;
  SendWr wr;
  wr.wr_id = 2;
  wr.opcode = WrOpcode::send;
  Sge sge = p.b.sge(0, 8);
  wr.sg_list = {&sge, 1};
  ASSERT_TRUE(post_send(*p.b.qp, wr).ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (p.a.counters().thread_rx_packets == served && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100us);
  ASSERT_GT(p.a.counters().thread_rx_packets, served);
}

TEST(ProgressTick, ATickThatFindsAPollerHoldingTheNicSkipsItsLook) {
  Pair p;
  start_ticking(p);
  const uint64_t before = p.a.counters().thread_looks_skipped;
  // The thread ticks every millisecond or so while the application polls;
  // most ticks come while the lock is held.
  hold_the_nic(p.a, /*poll=*/true, 200ms, 3ms);
  const uint64_t skipped = p.a.counters().thread_looks_skipped - before;
  EXPECT_GT(skipped, 0u);
}

TEST(ProgressTick, AThreadHoldingTheNicWithoutPollingIsWaitedFor) {
  Pair p;
  start_ticking(p);  // its next tick finds the lock held, and no poll since
  const uint64_t before = p.a.counters().thread_looks_skipped;
  hold_the_nic(p.a, /*poll=*/false, 100ms, 3ms);
  EXPECT_EQ(p.a.counters().thread_looks_skipped, before);
}

}  // namespace
}  // namespace uroce::test
