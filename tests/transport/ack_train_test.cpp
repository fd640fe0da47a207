// A SEND ping-pong where packets form GSO trains: the ACK each side holds
// for its application's answer leaves at the end of that answer's train, one
// datagram for both (Nic::pump), and the side that receives such a train
// takes the ACK first (Nic::poll_rx), so its request completes before the
// answer shows, as when the ACK went ahead on the wire.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "fake_wire.hpp"
#include "loopback.hpp"

namespace uroce::test {
namespace {

constexpr int kRounds = 200;

PairOptions trains_and_events() {
  PairOptions o;
  o.channel = true;
  o.max_recv_wr = kRounds + 8;
  o.congestion = transport::CongestionConfig{};
  o.congestion->mode = transport::CcMode::none;  // (its pacing would split what the test looks at)
  o.fake = net::FakeNetwork::create();
  o.fake->set_gso_max(8);
  return o;
}

bool post_send8(Side& s, uint64_t id, bool signaled) {
  Sge sge = s.sge(0, 8);
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::send;
  wr.send_flags = signaled ? send_flags::kSignaled : 0u;
  wr.sg_list = {&sge, 1};
  return post_send(*s.qp, wr).ok();
}

// For each SEND of `me` that answers one of the peer's (the peer's i-th, or
// for A the (i-1)-th: A's first SEND answers nothing), where the ACK of the
// SEND it answers went: right behind it in its train, or elsewhere.
struct Riding {
  int in_train = 0;   // the ACK ended the answer's train
  int elsewhere = 0;  // it left in another datagram (its hold ended first)
  int misplaced = 0;  // in the answer's batch but not right behind it, or not joined
};

Riding where_acks_went(const std::vector<WirePkt>& wire, const Endpoint& me, uint32_t my_psn, uint32_t peer_psn,
                       int answer_offset) {
  std::vector<int> send_at(kRounds + 1, -1), ack_at(kRounds + 1, -1);
  std::vector<const WirePkt*> mine;
  for (const WirePkt& w : wire) {
    if (!w.ok || w.src != me) continue;
    const int n = int(mine.size());
    mine.push_back(&w);
    if (w.opcode() == uint8_t(wire::Opcode::rc_send_only)) {
      const uint32_t i = w.psn() - my_psn;
      if (i < send_at.size() && send_at[i] < 0) send_at[i] = n;
    } else if (w.opcode() == uint8_t(wire::Opcode::rc_ack)) {
      const uint32_t i = w.psn() - peer_psn;
      if (i < ack_at.size() && ack_at[i] < 0) ack_at[i] = n;
    }
  }
  Riding r;
  for (int i = 0; i < kRounds; ++i) {
    const int answer = i + answer_offset;
    if (answer >= kRounds || ack_at[i] < 0 || send_at[answer] < 0) continue;
    const WirePkt& ack = *mine[size_t(ack_at[i])];
    const WirePkt& send = *mine[size_t(send_at[answer])];
    if (ack.batch != send.batch)
      ++r.elsewhere;
    else if (ack_at[i] == send_at[answer] + 1 && ack.joined)
      ++r.in_train;
    else
      ++r.misplaced;
  }
  return r;
}

TEST(AckTrain, TheAnswerCarriesItsAckAndThePeerCompletesItsSendFirst) {
  Fake f(trains_and_events());
  Pair& p = *f.p;
  f.net->set_recording(true);
  for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(post_recv(*p.b.qp, uint64_t(i), {p.b.sge(64, 64)}).ok());
  std::atomic<bool> b_ok{true};
  std::thread b([&] {  // answers each SEND at once, busy-polling
    for (int i = 0; i < kRounds && b_ok; ++i) {
      auto wc = poll_n(*p.b.rcq, 1, 10000);
      b_ok = wc.size() == 1 && wc[0].status == WcStatus::success && post_send8(p.b, 1000 + uint64_t(i), false);
    }
  });
  int send_first = 0, answer_first = 0;
  for (int i = 0; i < kRounds && b_ok; ++i) {
    ASSERT_TRUE(post_recv(*p.a.qp, uint64_t(i), {p.a.sge(64, 64)}).ok());
    ASSERT_TRUE(p.a.scq->req_notify(false).ok());
    ASSERT_TRUE(p.a.rcq->req_notify(false).ok());
    ASSERT_TRUE(post_send8(p.a, uint64_t(i), true));
    auto first = p.a.ch->get_event(10000);
    auto second = p.a.ch->get_event(10000);
    ASSERT_TRUE(first.ok() && second.ok()) << "round " << i;
    ++(*first == p.a.scq.get() ? send_first : answer_first);
    EXPECT_EQ(*second, *first == p.a.scq.get() ? p.a.rcq.get() : p.a.scq.get());
    p.a.scq->ack_events(1);
    p.a.rcq->ack_events(1);
    auto sc = poll_n(*p.a.scq, 1);
    auto rc = poll_n(*p.a.rcq, 1);
    ASSERT_EQ(sc.size(), 1u);
    ASSERT_EQ(rc.size(), 1u);
    EXPECT_EQ(sc[0].wr_id, uint64_t(i));
    EXPECT_EQ(rc[0].wr_id, uint64_t(i));
    EXPECT_EQ(rc[0].byte_len, 8u);
  }
  b.join();
  ASSERT_TRUE(b_ok);
  EXPECT_EQ(answer_first, 0) << "answers seen before the completion of the SEND they answer";
  EXPECT_EQ(send_first, kRounds);

  const std::vector<WirePkt> wire = decode_all(f.net->recorded());
  const Riding rb = where_acks_went(wire, f.b_ep, p.opt.psn_b, p.opt.psn_a, 0);
  const Riding ra = where_acks_went(wire, f.a_ep, p.opt.psn_a, p.opt.psn_b, 1);
  std::printf("B's ACKs: %d in their answer's train, %d alone; A's: %d and %d\n", rb.in_train, rb.elsewhere,
              ra.in_train, ra.elsewhere);
  EXPECT_EQ(rb.misplaced, 0);
  EXPECT_EQ(ra.misplaced, 0);
  EXPECT_EQ(rb.in_train + rb.elsewhere, kRounds);
  // B answers within microseconds: most of its ACKs ride (all on an idle
  // host; one whose answer came after the hold, 50 us, left alone).
  if (rb.in_train == 0) GTEST_SKIP() << "no ACK rode with its answer: the host was too loaded to tell";
}

// The 8-byte sequence number at the start of `s`'s buffer, read under the
// NIC lock (the progress thread lands WRITEs holding it): not a poll.
uint64_t seq_at(Side& s) {
  std::lock_guard g(s.ctx->nic().mu());
  uint64_t v;
  std::memcpy(&v, s.buf.data(), sizeof v);
  return v;
}

bool write_seq(Side& from, Side& to, uint64_t seq) {
  std::memcpy(from.buf.data() + 64, &seq, sizeof seq);
  Sge sge = from.sge(64, 8);
  SendWr wr;
  wr.wr_id = seq;
  wr.opcode = WrOpcode::rdma_write;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = to.addr(0);
  wr.rkey = to.mr->rkey();
  if (!post_send(*from.qp, wr).ok()) return false;
  auto wc = poll_n(*from.scq, 1, 10000);
  return wc.size() == 1 && wc[0].status == WcStatus::success;
}

bool spin_until(Side& s, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (seq_at(s) != want)
    if (std::chrono::steady_clock::now() > deadline) return false;
  return true;
}

// A WRITE answered by a WRITE, each side spinning on memory for the
// peer's (ib_write_lat): the peer's CQ never sees the answer, so the ACK
// held for it follows it in a datagram of its own, trains or not: a
// shared-memory ring puts a train's closing ACK first, and a poll that
// took that ACK alone would leave the WRITE it is about to spin for to its
// progress thread (ib_write_lat took 38-49 us a round trip, not 1).
TEST(AckTrain, AWriteSpunOnKeepsItsAckOutOfItsTrain) {
  PairOptions o = trains_and_events();
  o.channel = false;
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_recording(true);
  constexpr uint64_t kWrites = 100;
  std::atomic<bool> b_ok{true};
  std::thread b([&] {
    for (uint64_t i = 1; i <= kWrites && b_ok; ++i) b_ok = spin_until(p.b, i) && write_seq(p.b, p.a, i);
  });
  for (uint64_t i = 1; i <= kWrites; ++i) {
    ASSERT_TRUE(write_seq(p.a, p.b, i));
    ASSERT_TRUE(spin_until(p.a, i));
  }
  b.join();
  ASSERT_TRUE(b_ok);
  int acks = 0, behind = 0;
  const std::vector<WirePkt> wire = decode_all(f.net->recorded());
  for (size_t k = 0; k < wire.size(); ++k) {
    if (!wire[k].ok || wire[k].opcode() != uint8_t(wire::Opcode::rc_ack)) continue;
    ++acks;
    EXPECT_FALSE(wire[k].joined) << "an ACK in the train of the packet before it, packet " << k;
    if (k > 0 && wire[k - 1].src == wire[k].src && wire[k - 1].batch == wire[k].batch &&
        wire[k - 1].opcode() == uint8_t(wire::Opcode::rc_write_only))
      ++behind;
  }
  EXPECT_EQ(acks, int(2 * kWrites));
  if (behind == 0) GTEST_SKIP() << "no ACK left with its answer: the host was too loaded to tell";
}

// Without trains (a path that sends each packet as its own datagram) the
// held ACK goes ahead of the answer, on the wire as in the peer's CQs.
TEST(AckTrain, WithoutTrainsTheAckGoesAheadOfTheAnswer) {
  PairOptions o = trains_and_events();
  o.fake->set_gso_max(0);
  o.channel = false;
  Fake f(o);
  Pair& p = *f.p;
  f.net->set_recording(true);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(post_recv(*p.b.qp, uint64_t(i), {p.b.sge(64, 64)}).ok());
    ASSERT_TRUE(post_recv(*p.a.qp, uint64_t(i), {p.a.sge(64, 64)}).ok());
    ASSERT_TRUE(post_send8(p.a, uint64_t(i), true));
    ASSERT_EQ(poll_n(*p.b.rcq, 1, 10000).size(), 1u);
    ASSERT_TRUE(post_send8(p.b, uint64_t(i), false));
    ASSERT_EQ(poll_n(*p.a.rcq, 1, 10000).size(), 1u);
    ASSERT_EQ(poll_n(*p.a.scq, 1, 10000).size(), 1u);
  }
  int ack_first = 0;
  const std::vector<WirePkt> wire = decode_all(f.net->recorded());
  for (size_t k = 0; k + 1 < wire.size(); ++k) {
    const WirePkt &w = wire[k], &next = wire[k + 1];
    EXPECT_FALSE(w.joined);
    if (w.src == f.b_ep && next.src == f.b_ep && next.batch == w.batch &&
        w.opcode() == uint8_t(wire::Opcode::rc_send_only) && next.opcode() == uint8_t(wire::Opcode::rc_ack))
      ADD_FAILURE() << "an ACK behind the answer it left with, packet " << k;
    if (w.src == f.b_ep && next.src == f.b_ep && next.batch == w.batch && w.opcode() == uint8_t(wire::Opcode::rc_ack) &&
        next.opcode() == uint8_t(wire::Opcode::rc_send_only))
      ++ack_first;
  }
  if (ack_first == 0) GTEST_SKIP() << "no ACK left with its answer: the host was too loaded to tell";
}

}  // namespace
}  // namespace uroce::test
