// The progress thread of a passive server (an application that never polls:
// ib_read_lat's server, the seed's passive agent): it serves each request,
// then keeps looking for a while rather than sleep, so that the next
// request of a latency test finds it awake (LookPolicy::kPassiveSpinNs);
// once requests stop it sleeps, and idle it uses no CPU.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "loopback.hpp"

namespace uroce::test {
namespace {

using transport::Counters;

// CPU time of this whole process (both sides, their threads): a thread
// that spins on shows here whatever it records of itself.
uint64_t process_cpu_us() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

// Whether READs finding the thread awake is checked: a sanitizer slows
// each side's turn-around past the spin, which lasts 20 us of the clock
// all the same (under TSan none of 400 found it awake, with no pause).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kTimed = false;
#else
constexpr bool kTimed = true;
#endif

// A posts a signaled READ (wr_id `id`) of `len` bytes at `off` in B's
// buffer into its own buffer at `off`.
bool post_read(Pair& p, uint64_t id, size_t off, uint32_t len) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::rdma_read;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(off, len);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.addr(off);
  wr.rkey = p.b.mr->rkey();
  return post_send(*p.a.qp, wr).ok();
}

class ProgressPassive : public ::testing::TestWithParam<PacketPath> {};

TEST_P(ProgressPassive, ThreadStaysAwakeBetweenRequestsThenSleeps) {
  Pair p(over(GetParam()));
  fill_pattern(p.b.buf.data(), 1 << 16, 7);
  constexpr uint32_t kReads = 400;
  constexpr uint32_t kLen = 64;
  for (uint32_t i = 0; i < kReads; ++i) {
    const size_t off = (i * 131u) % ((1 << 16) - kLen);
    ASSERT_TRUE(post_read(p, i, off, kLen));
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
  // it slept in the socket after each (394 of 400 idle).  A host loaded
  // enough that the spinning thread lost its CPU for a scheduler slice
  // pauses the spins (thread_spin_pauses): asleep, a packet wakes it and
  // preempts, spinning it would wait its turn.  So does A's side taking
  // its busy poller for an application spinning on memory (its thread
  // preempted for over 50 us while responses waited: the known false
  // spinner episode, thread_spinner_watches on A): A's progress thread
  // then takes the responses, and the next request often comes after B
  // stopped looking.
  EXPECT_GE(c.thread_rx_packets, kReads);
  const std::string seen = std::to_string(c.thread_spin_rx) + " of " + std::to_string(c.thread_rx_packets) +
                           " packets found the thread awake; " + std::to_string(c.thread_socket_wakes) +
                           " socket wakes; " + std::to_string(c.thread_spin_pauses) + " spin pauses";
  const uint64_t a_watches = p.a.counters().thread_spinner_watches;
  const bool a_spinner = a_watches * 4 >= kReads;  // (a few watches are usual; an episode makes hundreds)
  if (kTimed && c.thread_spin_pauses == 0 && !a_spinner) {
    EXPECT_GE(c.thread_spin_rx * 10, uint64_t(kReads)) << seen;  // at least a tenth
  } else {
    std::printf("(%s) %s; A's spinner watches: %llu\n",
                !kTimed     ? "a sanitizer build"
                : a_spinner ? "A taken for a spinner"
                            : "a loaded host",
                seen.c_str(), (unsigned long long)a_watches);
  }
  EXPECT_LE(c.thread_spin_rx, c.thread_rx_packets);

  // Requests stopped: the spin ends, and the idle threads sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const uint64_t cpu0 = process_cpu_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(process_cpu_us() - cpu0, 30'000u);
}

// An application that polls its CQ drives progress itself: its thread
// takes nothing and never spins (it would take the CPU the application
// polls on).
TEST_P(ProgressPassive, ThreadOfAPollingApplicationDoesNotSpin) {
  Pair p(over(GetParam()));
  fill_pattern(p.b.buf.data(), 4096, 3);
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(post_read(p, i, 0, 256));
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
  // A poller that loses its CPU for a while (a loaded host: 2 of 50 runs
  // beside two CPU-bound loops, 2026-12-02) looks passive meanwhile, and
  // the thread may spin for a packet or two; a thread that spins for a
  // polling application would take packets all through the 100 READs.
  EXPECT_LE(c.thread_spin_rx, 2u) << c.thread_rx_packets << " packets taken by the thread";
}

INSTANTIATE_TEST_SUITE_P(, ProgressPassive, ::testing::Values(PacketPath::udp, PacketPath::shm), PacketPathName);

}  // namespace
}  // namespace uroce::test
