// ShmIo: the PacketIo over the rings: two NICs exchanging packets with no UDP
// datagram, GSO trains and their ICRCs, back-pressure, the doorbell that
// wakes a sleeper, stale ring files of dead processes, a restarted peer,
// fault injection on top.
#include "shm_fixture.hpp"
#include "support/scoped_env.hpp"

namespace uroce::net::shm_test {
namespace {

// -------------------------------------------------------------------- ShmIo

TxPacket tx_of(const Bytes& b, const Endpoint& dst, uint16_t gso = 0) {
  TxPacket p;
  p.dst = dst;
  const size_t h = std::min<size_t>(12, b.size());
  p.head = std::span<const uint8_t>(b).subspan(0, h);
  p.body = std::span<const uint8_t>(b).subspan(h);
  p.gso_segments = gso;
  return p;
}

// Receives exactly n packets within `limit` (copies), polling busily.
std::vector<std::pair<Bytes, RxPacket>> recv_n(PacketIo& io, size_t n, std::chrono::milliseconds limit = 3000ms) {
  std::vector<std::pair<Bytes, RxPacket>> got;
  std::vector<RxPacket> rx(64);
  const auto deadline = Clock::now() + limit;
  while (got.size() < n && Clock::now() < deadline) {
    const size_t m = io.recv_batch(rx);
    for (size_t i = 0; i < m; ++i) got.emplace_back(Bytes(rx[i].data.begin(), rx[i].data.end()), rx[i]);
    if (m == 0) std::this_thread::yield();
  }
  return got;
}

// The ICRC check the NIC's receive path makes of a packet a ring handed
// out (Nic::dispatch): the sender's IPv4 ID comes as the slot's hint.
wire::IcrcCheck check_icrc_as_nic(const Bytes& data, const RxPacket& meta, uint16_t local_port) {
  wire::IpUdpFields rip;
  rip.src = meta.src.addr;
  rip.dst = meta.dst;
  rip.src_port = meta.src.port;
  rip.dst_port = local_port;
  rip.ipv4_id = meta.ipv4_id_hint;
  return wire::verify_icrc(rip, data);
}

// UROCE_SHM_SLOTS: decimal digits, 2 to 65536; anything else is EINVAL
// naming it.
TEST(ShmSlots, EnvironmentTakesDigitsWithinTheRingsRange) {
  test::ScopedEnv env("UROCE_SHM_SLOTS");
  EXPECT_EQ(ShmIo::slots_from_env().value(), 0u);
  for (const auto& [v, n] : {std::pair{"2", 2u}, {"512", 512u}, {"3000", 3000u}, {"65536", 65536u}}) {
    env.set(v);
    auto r = ShmIo::slots_from_env();
    ASSERT_TRUE(r.ok()) << v;
    EXPECT_EQ(*r, n) << v;
  }
  for (const char* v : {"0", "1", "65537", "-2048", "2k", " 512", "99999999999"}) {
    env.set(v);
    auto r = ShmIo::slots_from_env();
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.status().code(), EINVAL) << v;
    EXPECT_NE(r.status().to_string().find("UROCE_SHM_SLOTS"), std::string::npos) << r.status().to_string();
  }
}

TEST_F(ShmTest, TwoNicsExchangePacketsWithoutUdpDatagrams) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  ASSERT_NE(a->ring(), nullptr);
  EXPECT_EQ(a->ring()->path(), shm_ring_path(dir_, a->local()));
  struct stat st;
  ASSERT_EQ(::stat(a->ring()->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  std::vector<Bytes> pkts;
  for (uint32_t k = 0; k < 100; ++k) pkts.push_back(make_pkt(7, k, k == 99 ? 4160 : len_for(k)));
  std::vector<TxPacket> tx;
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, b->local()));
  EXPECT_EQ(a->send_batch(std::span(tx).subspan(0, 50)), 50u);
  EXPECT_EQ(a->send_batch(std::span(tx).subspan(50)), 50u);
  auto got = recv_n(*b, 100);
  ASSERT_EQ(got.size(), 100u);
  for (uint32_t k = 0; k < 100; ++k) {
    EXPECT_EQ(got[k].first, pkts[k]) << "packet " << k;
    EXPECT_EQ(got[k].second.src, a->local());
    EXPECT_EQ(got[k].second.dst, kLo);
    EXPECT_EQ(got[k].second.ttl, a->udp().tx_ttl());
    EXPECT_EQ(got[k].second.ipv4_id_hint, 0);
  }
  // And back.
  std::vector<TxPacket> back;
  for (uint32_t k = 0; k < 10; ++k) back.push_back(tx_of(pkts[k], a->local()));
  EXPECT_EQ(b->send_batch(back), 10u);
  ASSERT_EQ(recv_n(*a, 10).size(), 10u);
  EXPECT_TRUE(recv_n(*b, 1, 20ms).empty());

  for (ShmIo* io : {a.get(), b.get()}) {
    const IoStats u = io->udp().stats();
    EXPECT_EQ(u.tx_packets, 0u);
    EXPECT_EQ(u.rx_packets, 0u);
    EXPECT_EQ(u.tx_errors, 0u);
    EXPECT_EQ(io->stats().doorbells_tx, 0u);  // nobody slept
    EXPECT_EQ(io->stats().doorbells_rx, 0u);
  }
  const IoStats sa = a->stats(), sb = b->stats();
  EXPECT_EQ(sa.shm_tx_packets, 100u);
  EXPECT_EQ(sa.tx_packets, 100u);
  EXPECT_EQ(sa.shm_rx_packets, 10u);
  EXPECT_EQ(sb.shm_rx_packets, 100u);
  EXPECT_EQ(sb.rx_packets, 100u);
  EXPECT_EQ(sb.shm_tx_packets, 10u);
}

TEST_F(ShmTest, Ipv6NicsExchangeThroughRingsToo) {
  const IpAddr lo6 = *IpAddr::parse("::1");
  auto a = open_io(0, {}, lo6), b = open_io(0, {}, lo6);
  if (!a || !b) GTEST_SKIP() << "no IPv6 loopback";
  ASSERT_NE(b->ring(), nullptr);
  std::vector<Bytes> pkts;
  std::vector<TxPacket> tx;
  for (uint32_t k = 0; k < 20; ++k) pkts.push_back(make_pkt(6, k, len_for(k)));
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, b->local()));
  tx.push_back(tx_of(pkts[0], Endpoint{kLo, b->local().port}));  // IPv4 from an IPv6 NIC: refused, as UDP would
  EXPECT_EQ(a->send_batch(tx), 20u);
  auto got = recv_n(*b, 20);
  ASSERT_EQ(got.size(), 20u);
  for (uint32_t k = 0; k < 20; ++k) {
    EXPECT_EQ(got[k].first, pkts[k]);
    EXPECT_EQ(got[k].second.src, a->local());
    EXPECT_EQ(got[k].second.dst, lo6);
  }
  EXPECT_EQ(a->stats().shm_tx_packets, 20u);
  EXPECT_EQ(a->stats().tx_errors, 1u);
  EXPECT_EQ(b->udp().stats().rx_packets, 0u);
}

TEST_F(ShmTest, GsoTrainBecomesOneSlotPerPacketWithItsIpv4Id) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  ASSERT_GT(a->gso_max_segments(), 1) << "the NIC must still build trains (they go as such over UDP)";
  // Real RoCEv2 packets: packet i of the train carries the ICRC for IPv4 ID i.
  wire::IpUdpFields ip;
  ip.src = a->local().addr;
  ip.dst = b->local().addr;
  ip.src_port = a->local().port;
  ip.dst_port = b->local().port;
  std::vector<Bytes> pkts;
  Bytes payload(1024);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 3);
  for (uint16_t i = 0; i < 5; ++i) {
    wire::Headers h;
    h.bth.opcode = 0x04;  // RC SEND_ONLY
    h.bth.dest_qp = 0x1234;
    h.bth.psn = 100u + i;
    ip.ipv4_id = i;
    pkts.push_back(test::make_udp_payload(h, payload, ip));
  }
  std::vector<TxPacket> tx;
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, b->local()));
  tx[0].gso_segments = 5;
  EXPECT_EQ(a->send_batch(tx), 5u);
  auto got = recv_n(*b, 5);
  ASSERT_EQ(got.size(), 5u);
  for (uint16_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].first, pkts[i]);
    EXPECT_EQ(got[i].second.ipv4_id_hint, i);
    EXPECT_EQ(check_icrc_as_nic(got[i].first, got[i].second, b->local().port), wire::IcrcCheck::ok) << "packet " << i;
  }
  EXPECT_EQ(b->udp().stats().rx_packets, 0u);
}

// A train that ends in an ACK (an answer and the ACK held for it, which
// only the shortest packet can end) reaches a ring ACK first: the
// receiver, whose look at the ring may fall between two slots, never sees
// the answer before it.  Each packet keeps its own IPv4 ID hint (its ICRC).
TEST_F(ShmTest, TrainEndingInAnAckPutsTheAckFirst) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  wire::IpUdpFields ip;
  ip.src = a->local().addr;
  ip.dst = b->local().addr;
  ip.src_port = a->local().port;
  ip.dst_port = b->local().port;
  const Bytes payload(8, 0x5a);
  std::vector<Bytes> pkts;
  for (uint16_t i = 0; i < 3; ++i) {
    wire::Headers h;
    h.bth.opcode = i < 2 ? 0x04 : 0x11;  // RC SEND_ONLY, SEND_ONLY, ACKNOWLEDGE
    h.bth.dest_qp = 0x1234;
    h.bth.psn = 100u + i;
    if (i == 2) h.aeth.msn = 7;
    ip.ipv4_id = i;
    pkts.push_back(
        test::make_udp_payload(h, i < 2 ? std::span<const uint8_t>(payload) : std::span<const uint8_t>(), ip));
  }
  ASSERT_LT(pkts[2].size(), pkts[0].size());
  std::vector<TxPacket> tx;
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, b->local()));
  tx[0].gso_segments = 3;
  // And a train that does not end in one keeps its order.
  std::vector<TxPacket> plain(tx.begin(), tx.begin() + 2);
  plain[0].gso_segments = 2;
  EXPECT_EQ(a->send_batch(tx), 3u);
  EXPECT_EQ(a->send_batch(plain), 2u);
  auto got = recv_n(*b, 5);
  ASSERT_EQ(got.size(), 5u);
  const size_t order[] = {2, 0, 1, 0, 1};
  const uint16_t hint[] = {2, 0, 1, 0, 1};
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(got[k].first, pkts[order[k]]) << "slot " << k;
    EXPECT_EQ(got[k].second.ipv4_id_hint, hint[k]) << "slot " << k;
  }
}

// A ring whose owner takes packed slots (kRingTakesPacked, which ShmIo
// advertises with whatever the engine does) gets a train of small packets
// as one slot, its packets in the same order with the same hints, each
// still checkable by its ICRC; one that does not gets a slot a packet.
TEST_F(ShmTest, TrainToARingThatTakesPackedSlotsIsOneSlot) {
  auto a = open_io(), b = open_io(), c = open_io();
  ASSERT_TRUE(a && b && c);
  b->advertise(0);
  std::vector<Bytes> pkts;
  std::vector<TxPacket> to_b, to_c;
  for (auto* dst : {b.get(), c.get()}) {
    wire::IpUdpFields ip;
    ip.src = a->local().addr;
    ip.dst = dst->local().addr;
    ip.src_port = a->local().port;
    ip.dst_port = dst->local().port;
    const Bytes payload(8, 0x5a);
    for (uint16_t i = 0; i < 4; ++i) {
      wire::Headers h;
      h.bth.opcode = i < 3 ? 0x04 : 0x11;  // RC SEND_ONLY x 3, ACKNOWLEDGE
      h.bth.dest_qp = 0x1234;
      h.bth.psn = 100u + i;
      if (i == 3) h.aeth.msn = 7;
      ip.ipv4_id = i;
      pkts.push_back(
          test::make_udp_payload(h, i < 3 ? std::span<const uint8_t>(payload) : std::span<const uint8_t>(), ip));
    }
  }
  for (size_t i = 0; i < 4; ++i) to_b.push_back(tx_of(pkts[i], b->local()));
  for (size_t i = 4; i < 8; ++i) to_c.push_back(tx_of(pkts[i], c->local()));
  to_b[0].gso_segments = to_c[0].gso_segments = 4;
  EXPECT_EQ(a->send_batch(to_b), 4u);
  EXPECT_EQ(a->send_batch(to_c), 4u);
  EXPECT_EQ(a->stats().shm_tx_packets, 8u);
  const size_t order[] = {3, 0, 1, 2};
  for (auto* dst : {b.get(), c.get()}) {
    const size_t base = dst == b.get() ? 0 : 4;
    auto got = recv_n(*dst, 4);
    ASSERT_EQ(got.size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
      const size_t i = order[k];
      EXPECT_EQ(got[k].first, pkts[base + i]) << "packet " << k;
      EXPECT_EQ(got[k].second.ipv4_id_hint, i) << "packet " << k;
      EXPECT_TRUE(got[k].second.via_ring);
      EXPECT_FALSE(got[k].second.truncated);
      EXPECT_EQ(check_icrc_as_nic(got[k].first, got[k].second, dst->local().port), wire::IcrcCheck::ok)
          << "packet " << k;
    }
    EXPECT_EQ(dst->ring()->header().tail.load(), dst == b.get() ? 1u : 4u);
  }
}

TEST_F(ShmTest, FullRingDropsAfterABoundedWaitAndCountsIt) {
  ShmConfig small;
  small.ring.slots = 16;
  auto a = open_io(), b = open_io(0, small);
  ASSERT_TRUE(a && b);
  std::vector<Bytes> pkts;
  for (uint32_t k = 0; k < 40; ++k) pkts.push_back(make_pkt(1, k, 100));
  std::vector<TxPacket> tx;
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, b->local()));
  const auto t0 = Clock::now();
  EXPECT_EQ(a->send_batch(tx), 16u);  // nobody reads b: 16 fit, the rest is dropped
  EXPECT_LT(Clock::now() - t0, 500ms);
  IoStats s = a->stats();
  EXPECT_EQ(s.shm_tx_packets, 16u);
  EXPECT_EQ(s.shm_tx_full, 24u);
  EXPECT_EQ(s.tx_errors, 24u);
  EXPECT_EQ(a->udp().stats().tx_packets, 0u);  // no detour through UDP: no reordering
  auto got = recv_n(*b, 16);
  ASSERT_EQ(got.size(), 16u);
  for (uint32_t k = 0; k < 16; ++k) EXPECT_EQ(got[k].first, pkts[k]);
  EXPECT_TRUE(recv_n(*b, 1, 20ms).empty());
  // Room again: the next batch goes through whole.
  EXPECT_EQ(a->send_batch(std::span(tx).subspan(20, 10)), 10u);
  got = recv_n(*b, 10);
  ASSERT_EQ(got.size(), 10u);
  for (uint32_t k = 0; k < 10; ++k) EXPECT_EQ(got[k].first, pkts[20 + k]);
  EXPECT_EQ(a->stats().shm_tx_full, 24u);
}

TEST_F(ShmTest, DoorbellWakesASleeperOnlyWhenItSleeps) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  const Bytes pkt = make_pkt(5, 1, 64);
  const TxPacket tx = tx_of(pkt, b->local());
  // b sleeps in its socket; a's packet goes into the ring and rings the bell.
  ASSERT_FALSE(b->prepare_wait());
  std::atomic<int> woke{-1};
  std::atomic<int64_t> slept_ms{0};
  std::thread sleeper([&] {
    pollfd p{b->wait_fd(), POLLIN, 0};
    const auto t = Clock::now();
    woke = ::poll(&p, 1, 5000);
    slept_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(woke.load(), -1) << "woke before anything was sent";
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  sleeper.join();
  b->done_wait();
  EXPECT_EQ(woke.load(), 1);
  EXPECT_LT(slept_ms.load(), 2000);
  auto got = recv_n(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, pkt);
  EXPECT_TRUE(recv_n(*b, 1, 20ms).empty());
  EXPECT_EQ(a->stats().doorbells_tx, 1u);
  EXPECT_EQ(a->udp().stats().tx_packets, 0u);  // the bell is no datagram of the UDP socket
  EXPECT_EQ(b->stats().doorbells_rx, 1u);
  EXPECT_EQ(b->udp().stats().rx_packets, 0u);
  // Awake (busy polling): no doorbell, no system call on either side.
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_EQ(recv_n(*b, 1).size(), 1u);
  EXPECT_EQ(a->stats().doorbells_tx, 1u);
  // A packet already waiting: prepare_wait says "do not sleep".
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_TRUE(b->prepare_wait());
  b->done_wait();
  EXPECT_EQ(recv_n(*b, 1).size(), 1u);
  EXPECT_EQ(a->stats().doorbells_tx, 1u);
}

// The bell is shared by the consumer's threads: thread 1 may announce its
// sleep (prepare_wait) and, before it enters poll(), thread 2 wakes from its
// own sleep and reads the bell meant for thread 1.  The next publish must
// ring again (the latch was re-armed).
TEST_F(ShmTest, BellReadByAnotherThreadIsRungAgain) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  const Bytes pkt = make_pkt(5, 1, 64);
  const TxPacket tx = tx_of(pkt, b->local());
  ASSERT_FALSE(b->prepare_wait());  // thread 2 sleeps
  ASSERT_FALSE(b->prepare_wait());  // thread 1 is about to
  ASSERT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_EQ(a->stats().doorbells_tx, 1u);
  // A third thread, busy polling, takes the packet; thread 2 wakes and
  // reads the bell.
  std::vector<RxPacket> one(1);
  ASSERT_EQ(b->recv_batch(one), 1u);
  EXPECT_EQ(Bytes(one[0].data.begin(), one[0].data.end()), pkt);
  pollfd p{b->wait_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  b->done_wait();
  EXPECT_EQ(b->stats().doorbells_rx, 1u);
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "nothing to wake for";
  // Thread 1 still has not slept; a's next packet must wake it.
  ASSERT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_EQ(a->stats().doorbells_tx, 2u);
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "thread 1 would sleep with a packet in the ring";
  b->done_wait();
  auto got = recv_n(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, pkt);
}

// Thread 2 reads the bell but takes nothing (its own wake-up was for
// something else): the packet waiting rings the bell again for thread 1.
TEST_F(ShmTest, BellReadByAThreadThatTakesNothingRingsForTheSleeper) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  const Bytes pkt = make_pkt(5, 1, 64);
  const TxPacket tx = tx_of(pkt, b->local());
  ASSERT_FALSE(b->prepare_wait());
  ASSERT_FALSE(b->prepare_wait());
  ASSERT_EQ(a->send_batch({&tx, 1}), 1u);
  pollfd p{b->wait_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  b->done_wait();
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "thread 1 would sleep with a packet in the ring";
  b->done_wait();
  EXPECT_EQ(recv_n(*b, 1).size(), 1u);
  EXPECT_EQ(a->stats().doorbells_tx, 1u);
}

TEST_F(ShmTest, StaleRingOfADeadProcessIsNotUsedAndIsCleaned) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto io = open_io();
    uint16_t port = io ? io->local().port : 0;
    (void)!::write(fds[1], &port, sizeof port);
    ::raise(SIGKILL);  // dies with its ring file in place
    ::_exit(1);
  }
  ::close(fds[1]);
  uint16_t port = 0;
  ASSERT_EQ(::read(fds[0], &port, sizeof port), ssize_t(sizeof port));
  ::close(fds[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_NE(port, 0);
  const std::string stale = shm_ring_path(dir_, Endpoint{kLo, port});
  struct stat sb;
  ASSERT_EQ(::stat(stale.c_str(), &sb), 0) << "the dead child left no ring file";
  EXPECT_EQ(ShmRing::attach(stale).status().code(), ESTALE);

  ShmConfig no_clean;
  no_clean.clean_stale = false;
  auto a = open_io(0, no_clean);
  ASSERT_TRUE(a);
  const Bytes pkt = make_pkt(1, 1, 64);
  const TxPacket tx = tx_of(pkt, Endpoint{kLo, port});
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_EQ(a->stats().shm_tx_packets, 0u);
  EXPECT_EQ(a->udp().stats().tx_packets, 1u);  // by UDP, as to any other host
  EXPECT_EQ(::stat(stale.c_str(), &sb), 0);

  auto c = open_io();  // cleans when it opens
  ASSERT_TRUE(c);
  EXPECT_NE(::stat(stale.c_str(), &sb), 0);
  EXPECT_EQ(files(), 2u);  // a's and c's rings
}

TEST_F(ShmTest, RestartedPeerIsFoundThroughItsNewRing) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  const Endpoint ep = b->local();
  const Bytes pkt = make_pkt(1, 1, 64);
  const TxPacket tx = tx_of(pkt, ep);
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  EXPECT_EQ(recv_n(*b, 1).size(), 1u);
  const uint64_t old_ino = b->ring()->inode();
  b.reset();  // closes its ring
  EXPECT_EQ(files(), 1u);
  auto b2 = open_io(ep.port);  // the same port again
  ASSERT_TRUE(b2);
  EXPECT_EQ(b2->local(), ep);
  (void)old_ino;
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  auto got = recv_n(*b2, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, pkt);
  EXPECT_EQ(b2->stats().shm_rx_packets, 1u);
  EXPECT_EQ(a->stats().shm_tx_packets, 2u);
  EXPECT_EQ(a->udp().stats().tx_packets, 0u);
}

// Processes that share a port each have a ring named after their registry
// slot, the top bits of their QP numbers.  A packet goes to the ring of its
// destination QP's slot; while there is none, to the port's own ring (a
// port not shared); once the slot's ring appears, there.
TEST_F(ShmTest, DestinationQpSlotPicksItsRingElseThePortsOwn) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  Bytes pkt = make_pkt(4, 0, 96);
  pkt[5] = 0x01;  // QPN 0x014002: slot 5 (qpn >> 14)
  pkt[6] = 0x40;
  pkt[7] = 0x02;
  const TxPacket tx = tx_of(pkt, b->local());
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  auto got = recv_n(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, pkt);

  ShmRing::CreateOptions o;
  o.slots = 16;
  auto slot5 = ShmRing::create(shm_ring_path(dir_, b->local(), 5), o);
  ASSERT_TRUE(slot5.ok()) << slot5.status().to_string();
  std::this_thread::sleep_for(1100ms);  // the sender looks again within a second
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  std::vector<RxPacket> rx(4);
  size_t n = 0;
  for (auto t0 = Clock::now(); n == 0 && Clock::now() - t0 < 2s;) n = (*slot5)->take(rx);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(Bytes(rx[0].data.begin(), rx[0].data.end()), pkt);
  EXPECT_TRUE(recv_n(*b, 1, 20ms).empty());
  EXPECT_EQ(a->stats().shm_tx_packets, 2u);
  EXPECT_EQ(a->udp().stats().tx_packets, 0u);
}

// A tmpfs without room for a full-size ring (a container's small /dev/shm)
// gets a smaller one instead of none.
TEST(ShmIoSpace, NoRoomForTheFullRingGivesASmallerOne) {
  SmallTmpfs fs("4m");
  if (fs.path().empty()) GTEST_SKIP() << fs.why();
  {
    UdpConfig u;
    u.local = kLo;
    u.port = 0;
    auto udp = UdpIo::open(u);
    ASSERT_TRUE(udp.ok()) << udp.status().to_string();
    ShmConfig cfg;
    cfg.dir = fs.path();
    ASSERT_EQ(cfg.ring.slots, 2048u);  // 8.6 MiB: no room
    auto io = ShmIo::wrap(std::move(*udp), cfg);
    ASSERT_TRUE(io.ok()) << io.status().to_string();
    ASSERT_NE((*io)->ring(), nullptr);
    EXPECT_EQ((*io)->ring()->slots(), 512u);  // 2.1 MiB
  }
}

TEST_F(ShmTest, UdpPeersStillWork) {
  auto a = open_io();
  ASSERT_TRUE(a);
  auto plain = open_plain();
  ASSERT_TRUE(plain);
  const Bytes pkt = make_pkt(1, 2, 200);
  TxPacket tx = tx_of(pkt, plain->local());
  EXPECT_EQ(a->send_batch({&tx, 1}), 1u);
  std::vector<RxPacket> rx(4);
  size_t n = 0;
  for (auto t0 = Clock::now(); n == 0 && Clock::now() - t0 < 2s;) {
    pollfd p{plain->wait_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    n = plain->recv_batch(rx);
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(Bytes(rx[0].data.begin(), rx[0].data.end()), pkt);
  tx = tx_of(pkt, a->local());
  EXPECT_EQ(plain->send_batch({&tx, 1}), 1u);
  auto got = recv_n(*a, 1);  // a busy poller reads its socket too, if less often
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, pkt);
  EXPECT_EQ(got[0].second.src, plain->local());
}

// Datagrams its UDP side read but did not hand out yet forbid a sleep as a
// waiting ring slot does (the socket no longer shows them).
TEST_F(ShmTest, UdpDatagramsReadButNotHandedOutForbidSleep) {
  auto a = open_io();
  ASSERT_TRUE(a);
  auto plain = open_plain();
  ASSERT_TRUE(plain);
  const Bytes p0 = make_pkt(1, 0, 100), p1 = make_pkt(1, 1, 100), p2 = make_pkt(1, 2, 100);
  TxPacket tx[] = {tx_of(p0, a->local()), tx_of(p1, a->local()), tx_of(p2, a->local())};
  ASSERT_EQ(plain->send_batch(tx), 3u);
  std::vector<RxPacket> one(1);
  size_t n = 0;
  for (auto t0 = Clock::now(); n == 0 && Clock::now() - t0 < 2s;) n = a->recv_batch(one);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(Bytes(one[0].data.begin(), one[0].data.end()), p0);
  EXPECT_TRUE(a->prepare_wait()) << "two datagrams wait in the UDP side";
  a->done_wait();
  auto got = recv_n(*a, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, p1);
  EXPECT_EQ(got[1].first, p2);
  EXPECT_FALSE(a->prepare_wait());
  a->done_wait();
}

TEST_F(ShmTest, FaultInjectionWrapsShmIo) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  const Endpoint to = b->local();
  FaultConfig fc;
  fc.seed = 11;
  fc.tx.drop = 0.3;
  auto fa = FaultIo::wrap(std::move(a), fc);
  ASSERT_TRUE(fa.ok()) << fa.status().to_string();
  std::vector<Bytes> pkts;
  std::vector<TxPacket> tx;
  for (uint32_t k = 0; k < 200; ++k) pkts.push_back(make_pkt(9, k, 60));
  for (const Bytes& p : pkts) tx.push_back(tx_of(p, to));
  (*fa)->send_batch(std::span(tx).subspan(0, 64));
  (*fa)->send_batch(std::span(tx).subspan(64, 64));
  (*fa)->send_batch(std::span(tx).subspan(128));
  const uint64_t dropped = (*fa)->stats().tx_faults.dropped;
  EXPECT_GT(dropped, 20u);
  EXPECT_LT(dropped, 120u);
  auto got = recv_n(*b, 200 - dropped);
  ASSERT_EQ(got.size(), 200 - dropped);
  EXPECT_TRUE(recv_n(*b, 1, 20ms).empty());
  uint32_t last = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const Parsed p = parse(got[i].first);
    EXPECT_TRUE(p.who == 9 && (i == 0 || p.k > last));
    last = p.k;
  }
  EXPECT_EQ((*fa)->stats().shm_tx_packets, 200 - dropped);
}

}  // namespace
}  // namespace uroce::net::shm_test
