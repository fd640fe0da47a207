// uroce::CompletionChannel: sleeping until a completion arrives.
#include <fcntl.h>
#include <poll.h>

#include <thread>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

PairOptions with_channel() {
  PairOptions o;
  o.channel = true;
  return o;
}

void post_recv(Side& s, uint64_t wr_id, size_t off, uint32_t len) {
  Sge sge = s.sge(off, len);
  RecvWr r{wr_id, {&sge, 1}};
  must(s.qp->post_recv(r), "post_recv");
}

void send(Side& s, size_t off, uint32_t len, uint32_t flags = send_flags::kSignaled) {
  Sge sge = s.sge(off, len);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.send_flags = flags;
  wr.sg_list = {&sge, 1};
  must(s.qp->post_send(wr), "post_send");
}

TEST(CompletionChannel, GetEventTimesOut) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto ch = must(ctx.create_comp_channel(), "channel");
  EXPECT_GE(ch.fd(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto ev = ch.get_event(30);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 25ms);
  ev = ch.get_event(0);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), ETIMEDOUT);
}

TEST(CompletionChannel, NonBlockingFdGivesEagain) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto ch = must(ctx.create_comp_channel(), "channel");
  ASSERT_EQ(::fcntl(ch.fd(), F_SETFL, ::fcntl(ch.fd(), F_GETFL) | O_NONBLOCK), 0);
  auto ev = ch.get_event();
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), EAGAIN);
}

TEST(CompletionChannel, ArmedCqWakesTheWaiterAndIsNamed) {
  Pair p(with_channel());
  must(p.b.rcq->req_notify(), "req_notify");
  post_recv(p.b, 5, 0, 4096);
  fill(std::span<std::byte>(p.a.buf).first(3000), 11);
  // The sender runs in another thread while this one sleeps in get_event.
  std::thread sender([&] { send(p.a, 0, 3000); });
  auto cq = p.b.channel->get_event(5000);
  sender.join();
  ASSERT_TRUE(cq.ok()) << cq.status().to_string();
  EXPECT_EQ(*cq, &*p.b.rcq);
  // Acknowledged at once: a CQ waits for its events' acks when destroyed,
  // and a check that throws below must not leave one unacknowledged.
  (*cq)->ack_events(1);
  const Wc wc = wait_wc(**cq);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, WcOpcode::recv);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(0), 3000), 0);
  // One event per arming: the next completion raises none until re-armed.
  post_recv(p.b, 6, 0, 64);
  send(p.a, 0, 64);
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 6u);
  auto none = p.b.channel->get_event(20);
  EXPECT_EQ(none.status().code(), ETIMEDOUT);
}

TEST(CompletionChannel, EventNamesTheCqWhereverItWasMoved) {
  Pair p(with_channel());
  CompletionQueue moved = std::move(*p.b.rcq);
  // (p.b.rcq now holds a moved-from shell; the QP still uses the CQ.)
  must(moved.req_notify(), "req_notify");
  post_recv(p.b, 1, 0, 64);
  send(p.a, 0, 64);
  auto cq = must(p.b.channel->get_event(5000), "get_event");
  moved.ack_events(1);
  EXPECT_EQ(cq, &moved);
  EXPECT_EQ(wait_wc(moved).wr_id, 1u);
  p.b.qp.reset();  // the QP goes before the CQ it uses
}

TEST(CompletionChannel, FdPollsReadableWithAnEvent) {
  Pair p(with_channel());
  must(p.b.rcq->req_notify(), "req_notify");
  post_recv(p.b, 1, 0, 64);
  send(p.a, 0, 64);
  // Someone must process the packets: B's NIC does it in its progress
  // thread when no application thread does.
  pollfd pfd{p.b.channel->fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  auto cq = must(p.b.channel->get_event(0), "get_event");
  EXPECT_EQ(cq, &*p.b.rcq);
  cq->ack_events(1);
}

TEST(CompletionChannel, SolicitedOnlyIgnoresUnsolicitedMessages) {
  Pair p(with_channel());
  must(p.b.rcq->req_notify(true), "req_notify(solicited)");
  post_recv(p.b, 1, 0, 64);
  post_recv(p.b, 2, 64, 64);
  send(p.a, 0, 64);
  EXPECT_EQ(wait_wc(*p.b.rcq).wr_id, 1u);
  EXPECT_EQ(p.b.channel->get_event(20).status().code(), ETIMEDOUT);
  send(p.a, 0, 64, send_flags::kSignaled | send_flags::kSolicited);
  auto cq = must(p.b.channel->get_event(5000), "get_event");
  cq->ack_events(1);
  EXPECT_EQ(cq, &*p.b.rcq);
  EXPECT_EQ(wait_wc(*cq).wr_id, 2u);
}

}  // namespace
}  // namespace uroce::apitest
