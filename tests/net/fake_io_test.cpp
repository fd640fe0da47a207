// FakeNetwork / FakeIo: delivery, drops, recording, and the by-hand queue
// steering protocol tests rely on.
#include "net/fake_io.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace uroce::net {
namespace {

using Bytes = std::vector<uint8_t>;

const Endpoint kA{*IpAddr::parse("10.0.0.1"), 4791};
const Endpoint kB{*IpAddr::parse("10.0.0.2"), 4791};

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

struct Net {
  std::shared_ptr<FakeNetwork> net = FakeNetwork::create();
  std::unique_ptr<FakeIo> a = net->attach(kA).value();
  std::unique_ptr<FakeIo> b = net->attach(kB).value();

  // Sends one packet whose payload is just `mark`.
  size_t send_mark(FakeIo& from, Endpoint to, uint8_t mark) {
    TxPacket p{to, {&mark, 1}, {}, {}, 0};
    return from.send_batch({&p, 1});
  }
  // Marks of everything `io` receives now.
  static Bytes recv_marks(FakeIo& io) {
    std::vector<RxPacket> rx(64);
    Bytes marks;
    size_t n = io.recv_batch(rx);
    for (size_t i = 0; i < n; ++i) marks.push_back(rx[i].data.empty() ? 0xff : rx[i].data[0]);
    return marks;
  }
};

TEST(FakeIo, DeliversGatheredPacketsWithMetadata) {
  Net n;
  Bytes h{1, 2}, body{3, 4, 5}, t{6};
  TxPacket pkts[] = {{kB, h, body, t, 0x02}, {kB, {}, body, {}, 0}};
  EXPECT_EQ(n.a->send_batch(pkts), 2u);
  std::vector<RxPacket> rx(8);
  ASSERT_EQ(n.b->recv_batch(rx), 2u);
  EXPECT_EQ(Bytes(rx[0].data.begin(), rx[0].data.end()), (Bytes{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Bytes(rx[1].data.begin(), rx[1].data.end()), body);
  EXPECT_EQ(rx[0].src, kA);
  EXPECT_EQ(rx[0].dst, kB.addr);
  EXPECT_EQ(rx[0].tos, 0x02);
  EXPECT_EQ(rx[0].ttl, 64);
  EXPECT_FALSE(rx[0].truncated);
  EXPECT_EQ(n.a->stats().tx_packets, 2u);
  EXPECT_EQ(n.a->stats().tx_bytes, 9u);
  EXPECT_EQ(n.b->stats().rx_packets, 2u);
  EXPECT_EQ(n.b->recv_batch(rx), 0u);
  // Sender memory can change after send_batch: the network holds copies.
  body[0] = 99;
  EXPECT_EQ(n.a->send_batch({pkts, 1}), 1u);
  ASSERT_EQ(n.b->recv_batch(rx), 1u);
  EXPECT_EQ(rx[0].data[2], 99);
}

TEST(FakeIo, RecvRespectsOutSize) {
  Net n;
  for (uint8_t i = 0; i < 5; ++i) n.send_mark(*n.a, kB, i);
  std::vector<RxPacket> rx(2);
  EXPECT_EQ(n.b->recv_batch(rx), 2u);
  EXPECT_EQ(rx[1].data[0], 1);
  EXPECT_EQ(n.net->queued(kB), 3u);
}

TEST(FakeIo, DropsWhenNoEndpoint) {
  Net n;
  const Endpoint nobody{*IpAddr::parse("10.0.0.9"), 4791};
  EXPECT_EQ(n.send_mark(*n.a, nobody, 1), 1u);  // like UDP: handed over, then lost
  EXPECT_EQ(n.net->stats().no_endpoint, 1u);
  auto late = n.net->attach(nobody).value();
  EXPECT_EQ(n.net->queued(nobody), 0u);
  // A detached endpoint stops receiving too.
  n.b.reset();
  EXPECT_EQ(n.send_mark(*n.a, kB, 2), 1u);
  EXPECT_EQ(n.net->stats().no_endpoint, 2u);
  EXPECT_EQ(n.net->stats().delivered, 0u);
}

TEST(FakeIo, AttachRulesAndEphemeralPorts) {
  Net n;
  auto dup = n.net->attach(kA);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), EEXIST);
  auto e1 = n.net->attach({kA.addr, 0}).value();
  auto e2 = n.net->attach({kA.addr, 0}).value();
  EXPECT_NE(e1->local().port, 0);
  EXPECT_NE(e1->local().port, e2->local().port);
  EXPECT_EQ(n.send_mark(*e1, e2->local(), 7), 1u);
  EXPECT_EQ(Net::recv_marks(*e2), Bytes{7});
}

TEST(FakeIo, RecordsEveryPacketSent) {
  Net n;
  n.net->set_recording(true);
  Bytes h{0xaa}, body{1, 2, 3};
  TxPacket p{kB, h, body, {}, 0x03};
  n.a->send_batch({&p, 1});
  n.send_mark(*n.b, kA, 5);
  n.send_mark(*n.a, {kB.addr, 1}, 6);  // recorded even though nobody gets it
  auto rec = n.net->recorded();
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_EQ(rec[0].src, kA);
  EXPECT_EQ(rec[0].dst, kB);
  EXPECT_EQ(rec[0].tos, 0x03);
  EXPECT_EQ(rec[0].data, (Bytes{0xaa, 1, 2, 3}));
  EXPECT_EQ(rec[1].src, kB);
  EXPECT_EQ(rec[2].data, Bytes{6});
  n.net->clear_recorded();
  EXPECT_TRUE(n.net->recorded().empty());
  // Each packet carries the number of the send_batch call it came in.
  const uint8_t m1 = 7, m2 = 8;
  TxPacket two[2] = {{kB, {&m1, 1}, {}, {}, 0}, {kB, {&m2, 1}, {}, {}, 0}};
  n.a->send_batch(two);
  n.send_mark(*n.a, kB, 9);
  rec = n.net->recorded();
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_EQ(rec[0].batch, rec[1].batch);
  EXPECT_EQ(rec[2].batch, rec[1].batch + 1);
  n.net->clear_recorded();
  n.net->set_recording(false);
  n.send_mark(*n.a, kB, 1);
  EXPECT_TRUE(n.net->recorded().empty());
}

TEST(FakeIo, WaitFdFollowsQueueAndHold) {
  Net n;
  EXPECT_FALSE(readable(n.b->wait_fd()));
  n.send_mark(*n.a, kB, 1);
  n.send_mark(*n.a, kB, 2);
  EXPECT_TRUE(readable(n.b->wait_fd()));
  EXPECT_TRUE(n.net->hold(kB, true));
  EXPECT_FALSE(readable(n.b->wait_fd()));
  EXPECT_TRUE(Net::recv_marks(*n.b).empty());  // held: nothing delivered
  EXPECT_TRUE(n.net->hold(kB, false));
  EXPECT_TRUE(readable(n.b->wait_fd()));
  std::vector<RxPacket> rx(1);
  EXPECT_EQ(n.b->recv_batch(rx), 1u);
  EXPECT_TRUE(readable(n.b->wait_fd()));  // one still waits
  EXPECT_EQ(n.b->recv_batch(rx), 1u);
  EXPECT_FALSE(readable(n.b->wait_fd()));
}

TEST(FakeIo, HoldDropDuplicateReorderInject) {
  Net n;
  n.net->hold(kB, true);
  for (uint8_t i = 0; i < 4; ++i) n.send_mark(*n.a, kB, i);
  auto q = n.net->peek(kB);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[2].data, Bytes{2});
  EXPECT_TRUE(n.net->reorder(kB, {3, 1, 2, 0}));               // 3 1 2 0
  EXPECT_TRUE(n.net->drop(kB, 1));                             // 3 2 0
  EXPECT_TRUE(n.net->duplicate(kB, 2));                        // 3 2 0 0
  EXPECT_TRUE(n.net->inject(kB, FakePacket{kA, kB, 0, {9}}));  // 3 2 0 0 9
  EXPECT_FALSE(n.net->drop(kB, 5));
  EXPECT_FALSE(n.net->reorder(kB, {0, 0, 1, 2, 3}));  // not a permutation
  EXPECT_FALSE(n.net->reorder(kB, {0, 1}));           // wrong size
  EXPECT_TRUE(n.net->hold(kB, false));
  EXPECT_EQ(Net::recv_marks(*n.b), (Bytes{3, 2, 0, 0, 9}));

  n.net->hold(kB, true);
  for (uint8_t i = 0; i < 3; ++i) n.send_mark(*n.a, kB, i);
  EXPECT_TRUE(n.net->reverse(kB));
  n.net->hold(kB, false);
  EXPECT_EQ(Net::recv_marks(*n.b), (Bytes{2, 1, 0}));
  EXPECT_FALSE(n.net->hold({kB.addr, 1}, true));  // not attached
}

TEST(FakeIo, FilterDropsAndRewrites) {
  Net n;
  n.net->set_filter([](FakePacket& p) {
    if (p.data[0] % 2) return false;  // drop odd marks
    p.data[0] += 100;
    return true;
  });
  for (uint8_t i = 0; i < 6; ++i) n.send_mark(*n.a, kB, i);
  EXPECT_EQ(Net::recv_marks(*n.b), (Bytes{100, 102, 104}));
  EXPECT_EQ(n.net->stats().filtered, 3u);
  n.net->set_filter({});
  n.send_mark(*n.a, kB, 1);
  EXPECT_EQ(Net::recv_marks(*n.b), Bytes{1});
}

TEST(FakeIo, QueueLimitOverflows) {
  Net n;
  n.net->set_queue_limit(3);
  for (uint8_t i = 0; i < 5; ++i) n.send_mark(*n.a, kB, i);
  EXPECT_EQ(n.net->stats().overflow, 2u);
  EXPECT_EQ(Net::recv_marks(*n.b), (Bytes{0, 1, 2}));
}

TEST(FakeIo, OversizeRefusedAndTruncatedAtSmallerReceiver) {
  auto net = FakeNetwork::create();
  auto big = net->attach(kA, 2000).value();
  auto small = net->attach(kB, 1000).value();
  Bytes d(1500, 1);
  TxPacket to_small{kB, d, {}, {}, 0};
  EXPECT_EQ(small->send_batch({&to_small, 1}), 0u);  // over its own max_payload
  EXPECT_EQ(small->stats().tx_errors, 1u);
  EXPECT_EQ(big->send_batch({&to_small, 1}), 1u);
  std::vector<RxPacket> rx(2);
  ASSERT_EQ(small->recv_batch(rx), 1u);
  EXPECT_TRUE(rx[0].truncated);
  EXPECT_EQ(small->stats().rx_truncated, 1u);
}

TEST(FakeIo, TwoThreadsPingPong) {
  Net n;
  constexpr int kRounds = 2000;
  auto run = [](FakeIo& io, Endpoint peer, bool starts) {
    std::vector<RxPacket> rx(8);
    uint32_t next = 0;
    if (starts) {
      TxPacket p{peer, {reinterpret_cast<uint8_t*>(&next), 4}, {}, {}, 0};
      io.send_batch({&p, 1});
      next = 1;
    }
    while (next < kRounds) {
      pollfd pf{io.wait_fd(), POLLIN, 0};
      if (::poll(&pf, 1, 2000) != 1) return false;  // stalled
      size_t k = io.recv_batch(rx);
      for (size_t i = 0; i < k; ++i) {
        uint32_t v;
        std::memcpy(&v, rx[i].data.data(), 4);
        if (v != next) return false;
        next = v + 1;
        uint32_t reply = next;
        TxPacket p{peer, {reinterpret_cast<uint8_t*>(&reply), 4}, {}, {}, 0};
        io.send_batch({&p, 1});
        ++next;
      }
    }
    return true;
  };
  std::atomic<bool> ok_a{false}, ok_b{false};
  std::thread ta([&] { ok_a = run(*n.a, kB, true); });
  std::thread tb([&] { ok_b = run(*n.b, kA, false); });
  ta.join();
  tb.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

}  // namespace
}  // namespace uroce::net
