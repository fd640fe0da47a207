// Completion channels: req_notify arms a CQ for its next (or next solicited)
// completion; the event arrives through a pollable fd; a thread blocked in
// get_event sleeps in the kernel; events are acknowledged before a CQ goes.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "loopback.hpp"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;

PairOptions with_channel() {
  PairOptions o;
  o.channel = true;
  return o;
}

bool readable(int fd, int ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

void send(Pair& p, uint64_t id, uint32_t len, bool solicited) {
  Sge s = p.a.sge(0, len);
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::send;
  wr.send_flags = solicited ? send_flags::kSolicited : 0;
  wr.sg_list = {&s, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
}

double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

struct ProcessUsage {
  double cpu_ms;
  long wakeups;  // voluntary context switches, all threads
};
ProcessUsage process_usage() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return {
      double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3,
      ru.ru_nvcsw};
}

TEST(CompletionChannel, EventForTheNextCompletion) {
  Pair p(with_channel());
  CompChannel& ch = *p.b.ch;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, i, {p.b.sge(0, 4096)}).ok());
  EXPECT_FALSE(readable(ch.fd()));
  ASSERT_TRUE(p.b.rcq->req_notify(false).ok());
  send(p, 1, 100, false);
  auto cq = ch.get_event(2000);
  ASSERT_TRUE(cq.ok()) << cq.status().to_string();
  EXPECT_EQ(*cq, p.b.rcq.get());
  EXPECT_FALSE(readable(ch.fd())) << "one event per arming";
  p.b.rcq->ack_events(1);
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 0u);
  // Not re-armed: the next completion raises no event.
  send(p, 2, 100, true);
  ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
  EXPECT_FALSE(readable(ch.fd(), 20));
  auto none = ch.get_event(10);
  EXPECT_EQ(none.status().code(), ETIMEDOUT);
  // Re-armed: the fd turns readable once the completion is there.
  ASSERT_TRUE(p.b.rcq->req_notify(false).ok());
  send(p, 3, 100, false);
  ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
  EXPECT_TRUE(readable(ch.fd(), 1000));
  cq = ch.get_event();
  ASSERT_TRUE(cq.ok());
  EXPECT_EQ(*cq, p.b.rcq.get());
  EXPECT_FALSE(readable(ch.fd()));
  p.b.rcq->ack_events(1);
}

TEST(CompletionChannel, SolicitedOnlyWakesOnSolicited) {
  Pair p(with_channel());
  CompChannel& ch = *p.b.ch;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(post_recv(*p.b.qp, i, {p.b.sge(0, 8192)}).ok());
  ASSERT_TRUE(p.b.rcq->req_notify(true).ok());
  send(p, 1, 5000, false);  // multi-packet, unsolicited
  ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
  EXPECT_FALSE(readable(ch.fd(), 20));
  ASSERT_EQ(::fcntl(ch.fd(), F_SETFL, ::fcntl(ch.fd(), F_GETFL) | O_NONBLOCK), 0);
  auto none = ch.get_event();
  EXPECT_EQ(none.status().code(), EAGAIN);
  send(p, 2, 5000, true);  // solicited: the S bit rides on the last packet
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 1u);
  ASSERT_TRUE(readable(ch.fd(), 1000));
  auto cq = ch.get_event();
  ASSERT_TRUE(cq.ok()) << cq.status().to_string();
  EXPECT_EQ(*cq, p.b.rcq.get());
  EXPECT_EQ(ch.get_event().status().code(), EAGAIN);
  p.b.rcq->ack_events(1);
  // Solicited-only arming never downgrades a pending "next" arming.
  ASSERT_TRUE(p.b.rcq->req_notify(false).ok());
  ASSERT_TRUE(p.b.rcq->req_notify(true).ok());
  send(p, 3, 10, false);
  ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
  EXPECT_TRUE(readable(ch.fd(), 1000));
  ASSERT_TRUE(ch.get_event().ok());
  p.b.rcq->ack_events(1);
}

// Waits (up to 2 s, the progress thread receiving) until `cq` holds `n`
// completions not yet polled; false if it never does.
bool holds(Cq& cq, uint32_t n) {
  for (auto until = std::chrono::steady_clock::now() + 2s; std::chrono::steady_clock::now() < until;) {
    {
      std::lock_guard g(cq.nic().mu());
      if (cq.size_locked() == n) return true;
    }
    std::this_thread::sleep_for(100us);
  }
  return false;
}

// Takes the one event queued on `ch`, which must name `cq`, and
// acknowledges it.
void take_event(CompChannel& ch, Cq& cq) {
  auto ev = ch.get_event(2000);
  ASSERT_TRUE(ev.ok()) << ev.status().to_string();
  EXPECT_EQ(*ev, &cq);
  cq.ack_events(1);
}

// Arming a CQ that still holds a completion of the kind armed for, which
// came while it was not armed, raises the event at once: UCX's
// ucp_worker_wait arms after its last poll and sleeps on the channel's fd
// without polling again (it hung before).  A completion of the other kind
// does not count.
TEST(CompletionChannel, ArmingACqThatHoldsACompletionRaisesItsEventAtOnce) {
  Pair p(with_channel());
  CompChannel& ch = *p.b.ch;
  Cq& cq = *p.b.rcq;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(post_recv(*p.b.qp, i, {p.b.sge(0, 4096)}).ok());
  send(p, 1, 100, false);  // arrives while nothing is armed
  ASSERT_TRUE(holds(cq, 1));
  EXPECT_FALSE(readable(ch.fd(), 20));
  // Solicited-only: the queued completion is not solicited.
  ASSERT_TRUE(cq.req_notify(true).ok());
  EXPECT_FALSE(readable(ch.fd(), 20));
  // Any completion: it is there, so the event is raised by the arming itself.
  ASSERT_TRUE(cq.req_notify(false).ok());
  ASSERT_TRUE(readable(ch.fd(), 0));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  EXPECT_FALSE(readable(ch.fd())) << "one event per arming";
  ASSERT_EQ(poll_n(cq, 1).size(), 1u);
  // Empty again: arming waits for the next completion, as before.
  ASSERT_TRUE(cq.req_notify(false).ok());
  EXPECT_FALSE(readable(ch.fd(), 20));
  send(p, 2, 100, false);
  ASSERT_TRUE(readable(ch.fd(), 2000));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  ASSERT_EQ(poll_n(cq, 1).size(), 1u);
  // A solicited completion queued before a solicited-only arming.
  send(p, 3, 100, true);
  ASSERT_TRUE(holds(cq, 1));
  EXPECT_FALSE(readable(ch.fd(), 20));
  ASSERT_TRUE(cq.req_notify(true).ok());
  ASSERT_TRUE(readable(ch.fd(), 0));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  // Polled, it no longer counts: the next solicited arming waits.
  auto wc = poll_n(cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  ASSERT_TRUE(cq.req_notify(true).ok());
  EXPECT_FALSE(readable(ch.fd(), 20));
}

// perftest -e takes an event, arms the CQ again and only then polls the
// completion the event announced, one event per completion: that
// completion raises no second event.  One that came after it does.
TEST(CompletionChannel, ACompletionAnEventAnnouncedRaisesNoSecondEvent) {
  Pair p(with_channel());
  CompChannel& ch = *p.b.ch;
  Cq& cq = *p.b.rcq;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(post_recv(*p.b.qp, i, {p.b.sge(0, 4096)}).ok());
  ASSERT_TRUE(cq.req_notify(false).ok());
  send(p, 1, 100, false);
  ASSERT_TRUE(readable(ch.fd(), 2000));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  ASSERT_TRUE(holds(cq, 1));
  ASSERT_TRUE(cq.req_notify(false).ok());
  EXPECT_FALSE(readable(ch.fd(), 20)) << "the queued completion had its event";
  ASSERT_EQ(poll_n(cq, 1).size(), 1u);
  // Announced, then another comes before the arming: that one raises it.
  send(p, 2, 100, false);
  ASSERT_TRUE(readable(ch.fd(), 2000));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  send(p, 3, 100, false);
  ASSERT_TRUE(holds(cq, 2));
  EXPECT_FALSE(readable(ch.fd(), 0));
  ASSERT_TRUE(cq.req_notify(false).ok());
  ASSERT_TRUE(readable(ch.fd(), 0));
  ASSERT_NO_FATAL_FAILURE(take_event(ch, cq));
  auto wc = poll_n(cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
}

// A thread blocked in get_event() sleeps: it burns no CPU while waiting,
// nor does the rest of the process (progress threads included).
// The waiting tests run over the UDP socket and over shared-memory rings,
// where packets wake a sleeper by its ring's bell.
class Waiting : public ::testing::TestWithParam<PacketPath> {};

TEST_P(Waiting, BlockedWaiterUsesNoCpu) {
  Pair p(over(GetParam(), with_channel()));
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 64)}).ok());
  ASSERT_TRUE(p.b.rcq->req_notify(false).ok());
  std::atomic<bool> woke{false};
  double waiter_cpu = -1;
  Cq* got = nullptr;
  std::thread waiter([&] {
    const double t0 = thread_cpu_ms();
    auto cq = p.b.ch->get_event();
    waiter_cpu = thread_cpu_ms() - t0;
    if (cq.ok()) got = *cq;
    woke = true;
  });
  std::this_thread::sleep_for(20ms);  // let it block
  // Traffic that completes nothing on B (an RDMA WRITE) wakes B's NIC while
  // the waiter sleeps in it; afterwards everything must go back to sleep.
  Sge s = p.a.sge(0, 5000);
  SendWr w;
  w.opcode = WrOpcode::rdma_write;
  w.send_flags = send_flags::kSignaled;
  w.sg_list = {&s, 1};
  w.remote_addr = p.b.addr(1000);
  w.rkey = p.b.mr->rkey();
  ASSERT_TRUE(post_send(*p.a.qp, w).ok());
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  std::this_thread::sleep_for(20ms);
  const ProcessUsage u0 = process_usage();
  std::this_thread::sleep_for(200ms);
  const ProcessUsage u1 = process_usage();
  EXPECT_FALSE(woke.load());
  send(p, 9, 64, false);
  waiter.join();
  EXPECT_EQ(got, p.b.rcq.get());
  // (The waiter's CPU includes its wake-up, which ThreadSanitizer's
  // instrumentation makes several times dearer.)
#if defined(__SANITIZE_THREAD__)
  constexpr double kWaiterMs = 20.0;
#else
  constexpr double kWaiterMs = 2.0;
#endif
  EXPECT_LT(waiter_cpu, kWaiterMs) << "ms of CPU used by the blocked waiter";
  // The whole process (progress threads included) sleeps too: no ticking.
  // (Wake-ups are the sharp measure; CPU time gets a margin for a busy host.)
  EXPECT_LT(u1.wakeups - u0.wakeups, 20) << "thread wake-ups over 200 ms of waiting";
  EXPECT_LT(u1.cpu_ms - u0.cpu_ms, 10.0) << "ms of CPU used by the process over 200 ms of waiting";
  p.b.rcq->ack_events(1);
}

// A thread waiting for a message of many packets takes them as they come
// instead of sleeping between them: a 4 MiB READ (4096 responses, in GSO
// trains of up to 64) costs it a few sleeps in the socket, not one per
// train that finds it asleep.
// (Over the socket only: the 4096 responses do not fit a shared-memory
// ring of 2048 slots, so there the producer waits for the consumer, and
// the waiter's sleeps follow the producer's scheduling.)
TEST(CompletionChannel, WaiterTakesAStreamWithoutSleepingPerPacket) {
  PairOptions o = with_channel();
  o.congestion = transport::CongestionConfig{};
  o.congestion->mode = transport::CcMode::none;
  o.buf_size = 4 << 20;
  Pair p(o);
  constexpr uint32_t kLen = 4 << 20;
  fill_pattern(p.b.buf.data(), kLen, 7);
  uint64_t fewest = UINT64_MAX;  // of any READ (a busy host stretches some gaps past the spin)
  for (int round = 0; round < 6; ++round) {
    const uint64_t sleeps_before = p.a.counters().app_wait_sleeps;
    std::memset(p.a.buf.data(), 0, kLen);
    ASSERT_TRUE(p.a.scq->req_notify(false).ok());
    SendWr wr;
    wr.wr_id = 100 + round;
    wr.opcode = WrOpcode::rdma_read;
    wr.send_flags = send_flags::kSignaled;
    Sge sge = p.a.sge(0, kLen);
    wr.sg_list = {&sge, 1};
    wr.remote_addr = p.b.addr(0);
    wr.rkey = p.b.mr->rkey();
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
    auto ev = p.a.ch->get_event(10000);
    ASSERT_TRUE(ev.ok()) << ev.status().to_string();
    p.a.scq->ack_events(1);
    auto wc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), kLen), -1);
    fewest = std::min(fewest, p.a.counters().app_wait_sleeps - sleeps_before);
  }
  // 3-5 here; 35-70 when the waiter sleeps whenever its CQ has nothing yet.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // The sanitizers' instrumentation stretches the work per packet, and so
  // the gaps between packets, past the waiter's 20 us: 25 sleeps seen under
  // ThreadSanitizer, 34 once under AddressSanitizer (2026-12-01, two tests
  // at a time).  The data is still checked above; the count only in the
  // other builds.
  (void)fewest;
#else
  EXPECT_LT(fewest, 20u) << "sleeps in the socket for the READ of 4096 packets that slept least";
#endif
}

// A's 64-byte signaled SEND (B posted a receive for it).
void post_signaled_send(Pair& p, uint64_t id) {
  Sge s = p.a.sge(0, 64);
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
}

// Takes and acknowledges the events of earlier arms still in x's channel.
void drop_events(Side& x) {
  for (auto e = x.ch->get_event(0); e.ok(); e = x.ch->get_event(0)) (*e)->ack_events(1);
}

// A thread that comes to wait for a completion right after a packet came
// (here the ACK of its SEND, just taken) keeps receiving for a while, as
// the next packet of a stream would be on its way (Nic::wait_spin), and
// then sleeps: with nothing more coming, the wait ends in the socket all the
// same, and after such misses the next waits sleep at once for a while.  (Counted from its own packets only, a waiter
// whose first look found nothing slept at once: qperf's rc_rdma_write_bw slept between most ACKs.)
TEST(CompletionChannel, WaiterRightAfterAPacketKeepsReceivingThenSleeps) {
  Pair p(with_channel());
  constexpr int kRounds = 20, kMoreRounds = 40;
  for (int i = 0; i < kRounds + kMoreRounds; ++i)
    ASSERT_TRUE(post_recv(*p.b.qp, 50 + uint64_t(i), {p.b.sge(0, 64)}).ok());
  // The waiter waits for its receive CQ, as a ping-pong's client waits for
  // the answer once its SEND completed; nothing arrives there, so the
  // arming holds through every round and no event is left to drop (the
  // fewer steps between the ACK and the wait, the fewer rounds a slow
  // phase of a VM pushes past the spin's 20 us).
  ASSERT_TRUE(p.a.rcq->req_notify(false).ok());
  // One round: a SEND, its completion taken, then a wait in which nothing
  // comes; true if that wait kept receiving before it slept.
  auto round = [&](int r) {
    post_signaled_send(p, uint64_t(r));
    const auto wc = poll_n(*p.a.scq, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.size() == 1) {
      EXPECT_EQ(wc[0].status, WcStatus::success);
    }
    const Counters c0 = p.a.counters();
    const auto ev = p.a.ch->get_event(10);  // nothing more comes
    EXPECT_FALSE(ev.ok());
    const Counters c1 = p.a.counters();
    EXPECT_EQ(c1.app_wait_sleeps - c0.app_wait_sleeps, 1u) << "the wait ends asleep";
    return c1.app_wait_spins - c0.app_wait_spins;
  };
  uint64_t spun = 0;
  for (int r = 0; r < kRounds && !HasFailure(); ++r) spun += round(r);
  // Nothing comes: a spin on the NIC's traffic is a miss, so after one the
  // next 2 waits do not spin, after two the next 4, ...: rounds 0, 3, 8 and
  // 17 (a straggling packet the waiter takes itself starts it over).  16-17
  // of 20 spun without the backoff.
  EXPECT_LT(spun, 10u) << "waits that kept receiving, of " << kRounds << " that missed";
  // A round whose test thread lost its CPU for 20 us before its wait does
  // not spin: on a busy machine the first 20 may have no spin at all, so up
  // to 40 more are given to show one.
  int total = kRounds;
  for (; spun == 0 && total < kRounds + kMoreRounds && !HasFailure(); ++total) spun += round(total);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    // The instrumentation stretches the steps between the ACK and the wait
    // past 20 us (0 of 20 spun under AddressSanitizer, 2026-12-01): only the
    // bound is checked there.
#else
  EXPECT_GE(spun, 1u) << "waits that kept receiving, of " << total;
#endif
  EXPECT_EQ(poll_n(*p.b.rcq, size_t(total)).size(), size_t(total));
}

// The same right after it sent: a waiter whose last packet came long ago
// keeps receiving for a while after its SEND (the answer to a request is
// on its way), then sleeps.  B is held, so that nothing comes back.
TEST(CompletionChannel, WaiterRightAfterItSentKeepsReceivingThenSleeps) {
  Pair p(with_channel());
  for (int i = 0; i < 24; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 50 + uint64_t(i), {p.b.sge(0, 64)}).ok());
  uint64_t spun = 0;
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    drop_events(p.a);
    ASSERT_TRUE(p.a.scq->req_notify(false).ok());
    Counters c0, c1;
    {
      std::lock_guard hold(p.b.ctx->nic().mu());
      std::this_thread::sleep_for(1ms);  // A's last packet came long ago
      c0 = p.a.counters();
      post_signaled_send(p, uint64_t(round));
      const auto ev = p.a.ch->get_event(5);  // B answers nothing meanwhile
      EXPECT_FALSE(ev.ok());
      c1 = p.a.counters();
    }
    spun += c1.app_wait_spins - c0.app_wait_spins;
    EXPECT_EQ(c1.app_wait_sleeps - c0.app_wait_sleeps, 1u) << "the wait ends asleep";
    EXPECT_EQ(c1.tx_packets - c0.tx_packets, 1u);
    const auto wc = poll_n(*p.a.scq, 1);  // (B lets go: the SEND completes)
    ASSERT_EQ(wc.size(), 1u);
    ASSERT_EQ(wc[0].status, WcStatus::success);
  }
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)  // (as above)
  EXPECT_GE(spun, 1u) << "waits that kept receiving, of " << kRounds;
#endif
  EXPECT_LT(spun, 10u) << "waits that kept receiving, of " << kRounds << " that missed (as above)";
  EXPECT_EQ(poll_n(*p.b.rcq, kRounds).size(), size_t(kRounds));
}

// A waiter that sent requests itself keeps receiving for their ACKs well
// past the 20 us a gap between packets allows: a stream's sender whose
// window is full gets one every half window, and asleep between them it
// woke late (qperf rc_bw 1 MiB, waiting for events, moved 2.2-2.6 GB/s
// rather than 3.6).  A's second SEND waits behind the first, unacknowledged,
// so A's waiter sends it; B is held and answers nothing.  The NIC counts
// the waits that went on past 20 us for such ACKs (app_wait_ack_spins);
// what the spin costs shows in the waiter's CPU time, bounded (its CPU
// share, when the suite runs beside it, is the scheduler's: a lower bound
// on it failed there).
TEST(CompletionChannel, WaiterThatSentRequestsKeepsReceivingForTheirAcks) {
  Pair p(with_channel());
  constexpr int kRounds = 10;
  for (int i = 0; i < 2 * kRounds; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 50 + uint64_t(i), {p.b.sge(0, 64)}).ok());
  uint64_t ack_spins = 0;
  for (int round = 0; round < kRounds; ++round) {
    drop_events(p.a);
    ASSERT_TRUE(p.a.scq->req_notify(false).ok());
    Counters c0, c1;
    double cpu;
    {
      std::lock_guard hold(p.b.ctx->nic().mu());
      c0 = p.a.counters();
      post_signaled_send(p, 2 * uint64_t(round));      // leaves at once
      post_signaled_send(p, 2 * uint64_t(round) + 1);  // waits for A's next look: the wait's
      const double t0 = thread_cpu_ms();
      const auto ev = p.a.ch->get_event(10);  // B answers nothing meanwhile
      cpu = thread_cpu_ms() - t0;
      EXPECT_FALSE(ev.ok());
      c1 = p.a.counters();
    }
    ack_spins += c1.app_wait_ack_spins - c0.app_wait_ack_spins;
    EXPECT_EQ(c1.req_packets - c0.req_packets, 2u);
    EXPECT_LE(c1.app_wait_sleeps - c0.app_wait_sleeps, 1u);  // (none if descheduled past the deadline)
    EXPECT_LT(cpu, 2.0) << "ms: the spin stops (1 ms at most, 250 us after the last send)";
    const auto wc = poll_n(*p.a.scq, 2);  // (B lets go: both SENDs complete)
    ASSERT_EQ(wc.size(), 2u);
    EXPECT_EQ(wc[0].wr_id, 2 * uint64_t(round));
    EXPECT_EQ(wc[1].wr_id, 2 * uint64_t(round) + 1);
    for (const auto& w : wc) EXPECT_EQ(w.status, WcStatus::success);
  }
  // Without the rule the spin stops 20 us after the SEND the waiter sent:
  // none.  With it, every round whose waiter got past 20 us awake (0.3-0.4
  // ms of CPU a wait with a CPU to itself); one is enough on a busy host.
  EXPECT_GE(ack_spins, 1u) << "waits that kept receiving for their ACKs, of " << kRounds;
  EXPECT_LE(ack_spins, uint64_t(kRounds));
  EXPECT_EQ(poll_n(*p.b.rcq, 2 * kRounds).size(), size_t(2 * kRounds));
}

void on_usr1(int) {}

// The waiter that keeps receiving while packets stream in keeps the
// application's signals blocked meanwhile, and sleeps with them unblocked:
// a handler without SA_RESTART that runs during the stream still ends the
// wait with EINTR (rdma-core's read() of the channel fd would).
TEST_P(Waiting, SignalDuringAStreamStillInterruptsTheWait) {
  PairOptions o = over(GetParam(), with_channel());
  o.congestion = transport::CongestionConfig{};
  o.congestion->mode = transport::CcMode::none;
  Pair p(o);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  // B writes into A's memory without pause: A's NIC receives all along,
  // and A's waiter, whose CQ stays quiet, takes those packets as it waits.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop) {
      SendWr wr;
      wr.opcode = WrOpcode::rdma_write;
      wr.send_flags = send_flags::kSignaled;
      Sge sge = p.b.sge(0, 256 * 1024);
      wr.sg_list = {&sge, 1};
      wr.remote_addr = p.a.addr(0);
      wr.rkey = p.a.mr->rkey();
      if (!post_send(*p.b.qp, wr).ok() || poll_n(*p.b.scq, 1, 5000).size() != 1) break;
    }
  });
  ASSERT_TRUE(p.a.rcq->req_notify(false).ok());
  const pthread_t waiter = pthread_self();
  std::thread signaller([&] {
    std::this_thread::sleep_for(50ms);
    pthread_kill(waiter, SIGUSR1);
  });
  const uint64_t taken_before = p.a.counters().rx_packets;
  auto ev = p.a.ch->get_event(5000);
  signaller.join();
  stop = true;
  writer.join();
  sigaction(SIGUSR1, &old, nullptr);
  ASSERT_FALSE(ev.ok()) << "an event came, yet A's CQ had nothing";
  EXPECT_EQ(ev.status().code(), EINTR) << ev.status().to_string();
  EXPECT_GT(p.a.counters().rx_packets, taken_before) << "no stream reached A while it waited";
}

INSTANTIATE_TEST_SUITE_P(Over, Waiting, ::testing::Values(PacketPath::udp, PacketPath::shm), PacketPathName);

TEST(CompletionChannel, WaitEventsAckedBlocksUntilAcked) {
  Pair p(with_channel());
  ASSERT_TRUE(post_recv(*p.b.qp, 1, {p.b.sge(0, 64)}).ok());
  ASSERT_TRUE(p.b.rcq->req_notify(false).ok());
  send(p, 1, 64, false);
  ASSERT_TRUE(p.b.ch->get_event(2000).ok());
  std::atomic<bool> done{false};
  std::thread t([&] {
    p.b.rcq->wait_events_acked();
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(done.load()) << "returned with an event unacknowledged";
  p.b.rcq->ack_events(1);
  EXPECT_TRUE(wait_until([&] { return done.load(); }, 1000));
  t.join();
  p.b.rcq->wait_events_acked();  // nothing outstanding: returns at once
}

}  // namespace
}  // namespace uroce::test
