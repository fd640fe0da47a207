// A program that spins on memory between CQ polls (perftest's ib_write_lat):
// only the progress thread can land the peer's WRITE it spins on.  Each poll
// of it that takes completions hands the socket to the thread, which then
// wakes for the next packet instead of finding it at its next look.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

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

// Posts a signaled 8-byte WRITE of `seq` from `from` (its buffer at offset 64)
// to the start of `to`'s buffer, and busy-polls its send CQ for the completion.
bool write_seq(Side& from, Side& to, uint64_t seq) {
  std::memcpy(from.buf.data() + 64, &seq, sizeof seq);
  SendWr wr;
  wr.wr_id = seq;
  wr.opcode = WrOpcode::rdma_write;
  wr.send_flags = send_flags::kSignaled;
  Sge sge = from.sge(64, 8);
  wr.sg_list = {&sge, 1};
  wr.remote_addr = to.addr(0);
  wr.rkey = to.mr->rkey();
  if (!post_send(*from.qp, wr).ok()) return false;
  auto wc = poll_n(*from.scq, 1, 10000);
  return wc.size() == 1 && wc[0].status == WcStatus::success && wc[0].wr_id == seq;
}

TEST(ProgressSpinner, PollThatTakesCompletionsHandsTheSocketToTheThread) {
  PairOptions o;
  o.congestion = transport::CongestionConfig{};
  o.congestion->mode = transport::CcMode::none;
  Pair p(o);
  bool a_ok = true, b_ok = true;
  int a_rounds = 0, b_rounds = 0;
  std::thread server([&] {
    for (uint64_t i = 1; i <= kRounds && b_ok; ++i) {
      b_ok = spin_until(p.b, i) && write_seq(p.b, p.a, i);
      b_rounds += b_ok;
    }
  });
  for (uint64_t i = 1; i <= kRounds && a_ok; ++i) {
    a_ok = write_seq(p.a, p.b, i) && spin_until(p.a, i);
    a_rounds += a_ok;
  }
  server.join();
  ASSERT_EQ(a_rounds, kRounds);
  ASSERT_EQ(b_rounds, kRounds);
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
        << c.thread_socket_wakes << " socket wakes for " << c.thread_rx_packets << " packets";
  }
}

}  // namespace
}  // namespace uroce::test
