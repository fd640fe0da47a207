// A program that spins on memory between CQ polls (perftest's ib_write_lat):
// only the progress thread can land the peer's WRITE it spins on.  Each poll
// of it that takes completions hands the socket to the thread, which then
// wakes for the next packet instead of finding it at its next look.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "fake_wire.hpp"
#include "loopback.hpp"

namespace uroce::test {
namespace {

constexpr int kRounds = 300;

// The 8-byte sequence number at the start of `s`'s buffer.  Read under the NIC
// lock, which the thread that lands WRITEs holds (as Side::counters does):
// taking the lock is not a poll, so the NIC still sees an application that
// spins on memory.
uint64_t seq_at(Side& s) {
  std::lock_guard g(s.ctx->nic().mu());
  uint64_t v;
  std::memcpy(&v, s.buf.data(), sizeof v);
  return v;
}

bool spin_until(Side& s, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (seq_at(s) != want) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// No congestion control: its pacing would add to the timing these tests
// look at.
PairOptions without_cc() {
  PairOptions o;
  o.congestion = transport::CongestionConfig{};
  o.congestion->mode = transport::CcMode::none;
  return o;
}

// Posts a signaled 8-byte WRITE (wr_id `id`) of `from`'s buffer at offset
// 64, read through `lkey`, to the start of `to`'s buffer.
bool post_write(Side& from, Side& to, uint64_t id, uint32_t lkey) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::rdma_write;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = from.sge(64, 8);
  sge.lkey = lkey;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = to.addr(0);
  wr.rkey = to.mr->rkey();
  return post_send(*from.qp, wr).ok();
}

// Writes `seq` that way and busy-polls the send CQ for the completion.
bool write_seq(Side& from, Side& to, uint64_t seq) {
  std::memcpy(from.buf.data() + 64, &seq, sizeof seq);
  if (!post_write(from, to, seq, from.mr->lkey())) return false;
  auto wc = poll_n(*from.scq, 1, 10000);
  return wc.size() == 1 && wc[0].status == WcStatus::success && wc[0].wr_id == seq;
}

// Both sides of a WRITE ping-pong, as ib_write_lat runs it: A writes
// sequence number i and polls for its completion, then spins on memory for
// B's i; B spins for A's i, then writes its own.  Each side waits `think`
// after it saw the peer's WRITE before it answers.
void write_ping_pong(Pair& p, std::chrono::microseconds think) {
  bool a_ok = true, b_ok = true;
  int a_rounds = 0, b_rounds = 0;
  std::thread server([&] {
    for (uint64_t i = 1; i <= kRounds && b_ok; ++i) {
      b_ok = spin_until(p.b, i);
      std::this_thread::sleep_for(think);
      b_ok = b_ok && write_seq(p.b, p.a, i);
      b_rounds += b_ok;
    }
  });
  for (uint64_t i = 1; i <= kRounds && a_ok; ++i) {
    if (i > 1) std::this_thread::sleep_for(think);
    a_ok = write_seq(p.a, p.b, i) && spin_until(p.a, i);
    a_rounds += a_ok;
  }
  server.join();
  ASSERT_EQ(a_rounds, kRounds);
  ASSERT_EQ(b_rounds, kRounds);
}

// The ACK of a WRITE waits for the application's answer (at most
// kLazyAckNs: here the answers come late, and the ACKs leave alone), so the
// requester completes first and then spins on memory for the answer, which
// only the progress thread can land.
TEST(ProgressSpinner, PollThatTakesCompletionsHandsTheSocketToTheThread) {
  Pair p(without_cc());
  write_ping_pong(p, std::chrono::microseconds(300));
  for (Side* s : {&p.a, &p.b}) {
    const Counters c = s->counters();
    SCOPED_TRACE(s == &p.a ? "side a" : "side b");
    // Nobody polls while a peer's WRITE is awaited, so the progress thread
    // lands those the application's polls for its ACK did not take (on a busy
    // host, most are taken so); it lands them woken by the packet itself,
    // the socket handed to it when the application took its completion (or
    // taken when the thread found the application idle): nearly all on an
    // idle host, half or more on one with a CPU hog.  Without the hand-over
    // it finds them at its looks: fewer than one in ten woke it.
    EXPECT_GE(c.thread_rx_packets, 10u);
    EXPECT_GE(c.thread_socket_wakes * 10, c.thread_rx_packets * 3)
        << c.thread_socket_wakes << " socket wakes for " << c.thread_rx_packets << " packets; held ACKs alone "
        << c.resp_held_acks_alone;
  }
}

// The same ping-pong answering at once: each ACK leaves with the answer,
// the answer's WRITE first (Nic::pump), so the poll in which the peer
// finds its completion has landed the WRITE it will spin for.  (With the
// ACK first, a poll that took the ACK alone would leave the WRITE behind
// it to the progress thread.)  On a loaded host answers come after the
// ACK's deadline, and then the ACK leaves alone, before it: only the
// ACKs that left in the same batch as their answer tell the order.
TEST(ProgressSpinner, TheAnswersWriteLeavesAheadOfTheAckItCarries) {
  Fake f(without_cc());
  Pair& p = *f.p;
  f.net->set_recording(true);
  write_ping_pong(p, std::chrono::microseconds(0));
  const std::vector<WirePkt> wire = decode_all(f.net->recorded());
  int together = 0;
  for (const bool side_b : {false, true}) {
    SCOPED_TRACE(side_b ? "side b" : "side a");
    const Endpoint me = side_b ? f.b_ep : f.a_ep;
    const uint32_t my_psn = side_b ? p.opt.psn_b : p.opt.psn_a;
    const uint32_t peer_psn = side_b ? p.opt.psn_a : p.opt.psn_b;
    // Per side: where in its own packets each of its WRITEs and ACKs went.
    std::vector<const WirePkt*> write(kRounds), ack(kRounds);
    std::vector<int> write_at(kRounds, -1), ack_at(kRounds, -1);
    int n = 0;
    for (const WirePkt& w : wire) {
      if (!w.ok || w.src != me) continue;
      if (w.opcode() == uint8_t(wire::Opcode::rc_write_only)) {
        const uint32_t i = w.psn() - my_psn;
        ASSERT_LT(i, uint32_t(kRounds));
        EXPECT_EQ(write_at[i], -1) << "WRITE " << i << " sent twice";
        write_at[i] = n;
        write[i] = &w;
      } else if (w.opcode() == uint8_t(wire::Opcode::rc_ack)) {
        const uint32_t i = w.psn() - peer_psn;
        ASSERT_LT(i, uint32_t(kRounds));
        EXPECT_EQ(ack_at[i], -1) << "ACK " << i << " sent twice";
        ack_at[i] = n;
        ack[i] = &w;
      }
      ++n;
    }
    // B answers A's WRITE i with its WRITE i; A answers B's i with its i+1.
    int answer_first = 0, ack_first = 0;
    for (int i = 0; i < kRounds; ++i) {
      const int answer = side_b ? i : i + 1;
      ASSERT_GE(ack_at[i], 0) << "no ACK of the peer's WRITE " << i;
      if (answer >= kRounds) continue;
      ASSERT_GE(write_at[answer], 0);
      if (ack[i]->batch != write[answer]->batch) continue;
      if (ack_at[i] == write_at[answer] + 1) ++answer_first;
      if (ack_at[i] < write_at[answer]) ++ack_first;
    }
    const Counters c = (side_b ? p.b : p.a).counters();
    EXPECT_EQ(ack_first, 0) << ack_first << " ACKs went ahead of the answer they left with";
    together += answer_first + ack_first;
    std::printf(
        "side %c: %d ACKs left right behind their answer; %llu held ACKs left alone; the progress "
        "thread landed %llu packets\n",
        side_b ? 'b' : 'a', answer_first, (unsigned long long)c.resp_held_acks_alone,
        (unsigned long long)c.thread_rx_packets);
  }
  // Most rounds, on a host not too loaded for a 200 us answer.
  if (together == 0) GTEST_SKIP() << "no ACK left with its answer: the host was too loaded to tell the order";
}

// Both sides WRITE at once, each waits for its completion, then they meet
// (MPI's put, flush and fence).  A WRITE that arrives while our own is
// unacknowledged may be the peer's answer (the ping-pong above), so its ACK
// may wait for ours: here nobody answers, and each such wait ends alone at
// its deadline.  After one, the QP's next ACKs leave at once, 16 of them,
// then twice as many after each miss in a row: a few misses in all, not
// one a round.
TEST(ProgressSpinner, WritesThatCrossStopHoldingTheirAcks) {
  Pair p(without_cc());
  std::barrier meet(2);
  bool a_ok = true, b_ok = true;
  std::thread b([&] {
    for (uint64_t i = 1; i <= kRounds && b_ok; ++i) {
      meet.arrive_and_wait();
      b_ok = write_seq(p.b, p.a, i);
    }
    if (!b_ok) meet.arrive_and_drop();
  });
  for (uint64_t i = 1; i <= kRounds && a_ok; ++i) {
    meet.arrive_and_wait();
    a_ok = write_seq(p.a, p.b, i);
  }
  if (!a_ok) meet.arrive_and_drop();
  b.join();
  ASSERT_TRUE(a_ok);
  ASSERT_TRUE(b_ok);
  for (Side* s : {&p.a, &p.b}) {
    SCOPED_TRACE(s == &p.a ? "side a" : "side b");
    EXPECT_EQ(seq_at(*s), uint64_t(kRounds));
    const Counters c = s->counters();
    EXPECT_EQ(c.resp_acks_sent, uint64_t(kRounds));
    // Each miss makes the next 16 ACKs leave at once (more after misses
    // in a row; but an ACK that left with our next WRITE, which a slow exit
    // from the barrier can make look like an answer, starts that over).
    // Without that, most rounds held and missed.
    EXPECT_LE(c.resp_held_acks_alone, uint64_t(kRounds / 12));
  }
}

// An ACK held for the application's answer (the peer's WRITE came while our
// own was unacknowledged) still leaves when that answer fails here: the
// WRITE with a bad lkey puts our QP in error, whose flush forgets the ACK
// owed, yet the peer's WRITE executed before it is acknowledged (else the
// peer resends it to a QP in error until its retries run out).
TEST(ProgressSpinner, AHeldAckLeavesWhenItsAnswerFailsLocally) {
  Fake f(without_cc());
  Pair& p = *f.p;
  ASSERT_TRUE(f.net->hold(f.b_ep, true));  // A's WRITE waits at B, unacknowledged
  ASSERT_TRUE(post_write(p.a, p.b, 1, p.a.mr->lkey()));
  (void)drain(*p.a.scq, 1);  // A polls (its progress thread leaves it the ACK)
  ASSERT_TRUE(post_write(p.b, p.a, 7, p.b.mr->lkey()));
  // A's progress thread takes B's WRITE (A polled a moment ago): its ACK
  // waits for A's answer.
  ASSERT_TRUE(wait_until([&] {
    (void)drain(*p.a.scq, 0);
    return p.a.counters().rx_packets >= 1;
  }));
  if (p.a.counters().resp_acks_sent != 0) GTEST_SKIP() << "the ACK left before the answer (a loaded host)";
  ASSERT_TRUE(post_write(p.a, p.b, 2, p.a.mr->lkey() ^ 0x5a5a00));  // the answer, from no MR
  ASSERT_TRUE(f.net->hold(f.b_ep, false));
  const std::vector<Wc> b_wc = poll_n(*p.b.scq, 1, 5000);
  ASSERT_EQ(b_wc.size(), 1u);
  EXPECT_EQ(b_wc[0].wr_id, 7u);
  EXPECT_EQ(b_wc[0].status, WcStatus::success);
  EXPECT_EQ(p.a.counters().resp_acks_sent, 1u);
  bool bad_seen = false;
  for (const Wc& wc : drain(*p.a.scq, 200))
    if (wc.wr_id == 2) bad_seen = wc.status == WcStatus::loc_prot_err;
  EXPECT_TRUE(bad_seen);
}

// The same when the QP fails on its own side at any other time: behind a
// WRITE (whose ACK the one it holds waits for), its SEND drew an RNR NAK
// with no retries left.  The ACK of the peer's WRITE leaves before the QP
// enters ERR, so that WRITE, which was executed, completes as such rather
// than with retry_exc_err.
TEST(ProgressSpinner, AHeldAckLeavesWhenItsQpFailsOnItsOwnSide) {
  PairOptions o = without_cc();
  o.rnr_retry = 0;
  Fake f(o);
  Pair& p = *f.p;
  ASSERT_TRUE(f.net->hold(f.b_ep, true));  // A's requests wait at B, which has no receive posted
  ASSERT_TRUE(post_write(p.a, p.b, 1, p.a.mr->lkey()));
  SendWr wr;
  wr.wr_id = 2;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = p.a.sge(0, 8);
  wr.sg_list = {&sge, 1};
  ASSERT_TRUE(post_send(*p.a.qp, wr).ok());
  (void)drain(*p.a.scq, 1);
  ASSERT_TRUE(post_write(p.b, p.a, 7, p.b.mr->lkey()));
  // A's progress thread takes B's WRITE (A polled a moment ago): its ACK
  // waits for the ACK of A's WRITE.
  ASSERT_TRUE(wait_until([&] {
    (void)drain(*p.a.scq, 0);
    return p.a.counters().rx_packets >= 1;
  }));
  if (p.a.counters().resp_acks_sent != 0) GTEST_SKIP() << "the ACK left before the NAK (a loaded host)";
  ASSERT_TRUE(f.net->hold(f.b_ep, false));  // B ACKs the WRITE, and NAKs the SEND: RNR
  const std::vector<Wc> a_wc = poll_n(*p.a.scq, 2, 5000);
  ASSERT_EQ(a_wc.size(), 2u);
  EXPECT_EQ(a_wc[0].wr_id, 1u);
  EXPECT_EQ(a_wc[0].status, WcStatus::success);
  EXPECT_EQ(a_wc[1].wr_id, 2u);
  EXPECT_EQ(a_wc[1].status, WcStatus::rnr_retry_exc_err);
  // (Left alone at its deadline, before the NAK came, it proves nothing.
  // Dropped by the ERR flush, it was never sent: that is the failure.)
  if (p.a.counters().resp_held_acks_alone != 0 && p.a.counters().resp_acks_sent != 0)
    GTEST_SKIP() << "the ACK left at its deadline (a loaded host)";
  const std::vector<Wc> b_wc = poll_n(*p.b.scq, 1, 5000);
  ASSERT_EQ(b_wc.size(), 1u);
  EXPECT_EQ(b_wc[0].wr_id, 7u);
  EXPECT_EQ(b_wc[0].status, WcStatus::success);
  EXPECT_GE(p.a.counters().resp_acks_sent, 1u);
}

}  // namespace
}  // namespace uroce::test
