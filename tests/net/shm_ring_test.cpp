// ShmRing: the shared-memory packet ring between the uroce NICs of one host:
// order, wrap-around, a full ring, producers in threads and in processes,
// producers that die or stall mid-write, attaching to what is not a ring.
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include "shm_fixture.hpp"

namespace uroce::net::shm_test {
namespace {

// ------------------------------------------------------------------ ShmRing

// A ring that does not fit in its file system (a container's small
// /dev/shm) is refused when created, with ENOSPC: a file merely truncated
// to size would fault with SIGBUS at the first write to a page tmpfs cannot
// give.  Needs the right to mount a tmpfs (root), else skipped.
TEST(ShmRingSpace, AFullTmpfsFailsCreateInsteadOfFaultingLater) {
  SmallTmpfs fs("1m");
  if (fs.path().empty()) GTEST_SKIP() << fs.why();
  const std::string dir = fs.path();
  ShmRing::CreateOptions opt;
  opt.slots = 2048;  // 8.6 MiB
  auto ring = ShmRing::create(dir + "/big.ring", opt);
  EXPECT_FALSE(ring.ok());
  if (!ring.ok()) {
    EXPECT_EQ(ring.status().code(), ENOSPC) << ring.status().to_string();
  }
  ring = Result<std::unique_ptr<ShmRing>>(err::inval("released"));
  opt.slots = 64;  // 270 KiB: fits
  auto small = ShmRing::create(dir + "/small.ring", opt);
  EXPECT_TRUE(small.ok()) << small.status().to_string();
  small = Result<std::unique_ptr<ShmRing>>(err::inval("released"));
}

TEST_F(ShmTest, RingKeepsOrderBytesAndMetadata) {
  auto ring = make_ring(64);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  EXPECT_FALSE(prod->owner());
  EXPECT_EQ(prod->inode(), ring->inode());
  std::vector<Bytes> sent;
  for (uint32_t k = 0; k < 50; ++k) {
    sent.push_back(make_pkt(1, k, k == 49 ? ring->payload_max() : len_for(k)));
    ASSERT_EQ(put(*prod, sent.back(), uint16_t(k)), ShmRing::Put::ok);
  }
  std::vector<RxPacket> rx(7);
  size_t got = 0;
  while (got < 50) {
    const size_t n = ring->take(rx);
    ASSERT_GT(n, 0u) << "after " << got;
    for (size_t i = 0; i < n; ++i, ++got) {
      const RxPacket& p = rx[i];
      ASSERT_EQ(p.data.size(), sent[got].size());
      EXPECT_EQ(std::memcmp(p.data.data(), sent[got].data(), p.data.size()), 0) << "packet " << got;
      EXPECT_EQ(p.src, (Endpoint{kLo, 1234}));
      EXPECT_EQ(p.dst, kLo);
      EXPECT_EQ(p.tos, 0x02);
      EXPECT_EQ(p.ttl, 64);
      EXPECT_EQ(p.ipv4_id_hint, got);
      EXPECT_FALSE(p.truncated);
    }
  }
  EXPECT_EQ(ring->take(rx), 0u);
  EXPECT_EQ(ring->rx_packets(), 50u);
  EXPECT_EQ(ring->header().rx_packets.load(), 50u);
  EXPECT_EQ(ring->header().tail.load(), 50u);
  EXPECT_EQ(ring->skipped(), 0u);
}

// Parts split as the NIC's packets are (head, body, tail), for put_packed.
ShmRing::Part part_of(const Bytes& b, uint16_t hint) {
  const size_t h = std::min<size_t>(b.size(), 12), t = b.size() > 16 ? 4 : 0;
  std::span<const uint8_t> s(b);
  return ShmRing::Part{s.subspan(0, h), s.subspan(h, b.size() - h - t), s.subspan(b.size() - t), hint};
}

// A packed slot hands out its packets in record order, byte-exact, each
// with its own IPv4 ID hint and the slot's metadata, then the slots after
// it; a take with less room than the slot's records goes on with the rest
// at the next take, the packets it handed out valid until then.
TEST_F(ShmTest, PackedSlotHandsOutItsRecordsInOrderAcrossTakes) {
  auto ring = make_ring(64);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  std::vector<Bytes> sent;
  std::vector<ShmRing::Part> parts;
  const uint16_t hints[] = {4, 0, 1, 2, 3};
  for (uint32_t k = 0; k < 5; ++k) sent.push_back(make_pkt(2, k, len_for(k)));
  for (uint32_t k = 0; k < 5; ++k) parts.push_back(part_of(sent[k], hints[k]));
  ASSERT_EQ(prod->put_packed(meta(), parts), ShmRing::Put::ok);
  sent.push_back(make_pkt(2, 5, 40));
  ASSERT_EQ(put(*prod, sent.back(), 9), ShmRing::Put::ok);
  EXPECT_EQ(ring->header().tail.load(), 2u);  // two slots for six packets
  std::vector<RxPacket> rx(2);
  size_t got = 0;
  const uint16_t want_hint[] = {4, 0, 1, 2, 3, 9};
  for (size_t want : {2u, 2u, 2u}) {  // (the last take: the packed slot's last record, then the plain slot)
    const size_t n = ring->take(rx);
    ASSERT_EQ(n, want) << "after " << got;
    for (size_t i = 0; i < n; ++i, ++got) {
      ASSERT_EQ(rx[i].data.size(), sent[got].size()) << "packet " << got;
      EXPECT_EQ(std::memcmp(rx[i].data.data(), sent[got].data(), rx[i].data.size()), 0) << "packet " << got;
      EXPECT_EQ(rx[i].ipv4_id_hint, want_hint[got]);
      EXPECT_EQ(rx[i].src, (Endpoint{kLo, 1234}));
      EXPECT_EQ(rx[i].tos, 0x02);
      EXPECT_FALSE(rx[i].truncated);
      EXPECT_TRUE(rx[i].via_ring);
    }
  }
  EXPECT_EQ(ring->take(rx), 0u);
  EXPECT_EQ(ring->rx_packets(), 6u);
  // Both slots were freed: the whole ring takes a put again, and no more.
  for (uint32_t k = 0; k < 64; ++k) ASSERT_EQ(put(*prod, make_pkt(3, k, 20)), ShmRing::Put::ok) << k;
  EXPECT_EQ(put(*prod, make_pkt(3, 64, 20)), ShmRing::Put::full);
}

// What put_packed refuses writes nothing: fewer than two parts, more than
// kMaxPacked, more bytes than a slot holds with the records' headers.
TEST_F(ShmTest, PackedPutRefusesWhatASlotCannotHold) {
  auto ring = make_ring(64);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  const Bytes small = make_pkt(1, 0, 20);
  std::vector<ShmRing::Part> parts(shm::kMaxPacked + 1, part_of(small, 0));
  EXPECT_EQ(prod->put_packed(meta(), std::span(parts).subspan(0, 1)), ShmRing::Put::too_big);
  EXPECT_EQ(prod->put_packed(meta(), parts), ShmRing::Put::too_big);
  const Bytes half = make_pkt(1, 1, ring->payload_max() / 2);
  const ShmRing::Part two[] = {part_of(half, 0), part_of(half, 1)};  // 2 x 4 bytes of headers too many
  EXPECT_EQ(prod->put_packed(meta(), two), ShmRing::Put::too_big);
  EXPECT_EQ(ring->header().tail.load(), 0u);
  EXPECT_EQ(prod->put_packed(meta(), std::span(parts).subspan(0, shm::kMaxPacked)), ShmRing::Put::ok);
  std::vector<RxPacket> rx(64);
  EXPECT_EQ(ring->take(rx), shm::kMaxPacked);
}

// A packed slot is written by another process of our user: a record whose
// length runs past the slot is handed out truncated (the engine counts and
// drops it) and ends that slot; the slots after it are taken as usual.
TEST_F(ShmTest, PackedRecordRunningPastItsSlotIsTruncated) {
  auto ring = make_ring(64);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  const Bytes a = make_pkt(1, 0, 30), b = make_pkt(1, 1, 30), c = make_pkt(1, 2, 50);
  const ShmRing::Part parts[] = {part_of(a, 0), part_of(b, 1)};
  ASSERT_EQ(prod->put_packed(meta(), parts), ShmRing::Put::ok);
  ASSERT_EQ(put(*prod, c, 2), ShmRing::Put::ok);
  // The second record's length, now beyond the slot's end.
  uint8_t* rec = ring->payload_at(0) + shm::kRecordHeader + a.size();
  const uint16_t bad = 4000;
  std::memcpy(rec, &bad, sizeof bad);
  std::vector<RxPacket> rx(8);
  ASSERT_EQ(ring->take(rx), 3u);
  EXPECT_EQ(Bytes(rx[0].data.begin(), rx[0].data.end()), a);
  EXPECT_FALSE(rx[0].truncated);
  EXPECT_TRUE(rx[1].truncated);
  EXPECT_EQ(rx[1].data.size(), b.size());  // (what the slot holds of it)
  EXPECT_EQ(Bytes(rx[2].data.begin(), rx[2].data.end()), c);
  EXPECT_FALSE(rx[2].truncated);
}

TEST_F(ShmTest, RingWrapsAroundManyLaps) {
  auto ring = make_ring(8);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  EXPECT_EQ(ring->slots(), 8u);
  std::vector<RxPacket> rx(8);
  uint32_t next_put = 0, next_take = 0;
  for (int round = 0; round < 3000; ++round) {
    // At most half the ring: the other half may still be handed out (held
    // until the next take).
    const uint32_t burst = 1 + uint32_t(round * 5 % 4);
    for (uint32_t i = 0; i < burst; ++i, ++next_put)
      ASSERT_EQ(put(*prod, make_pkt(2, next_put, len_for(next_put))), ShmRing::Put::ok) << next_put;
    size_t n = ring->take(rx);
    ASSERT_EQ(n, burst);
    for (size_t i = 0; i < n; ++i, ++next_take) {
      const Parsed p = parse(rx[i].data);
      ASSERT_TRUE(p.intact && p.who == 2 && p.k == next_take) << "expected " << next_take << " got " << p.k;
    }
  }
  EXPECT_GT(next_take, 8u * 900);
  EXPECT_EQ(ring->rx_packets(), next_take);
  EXPECT_EQ(ring->header().tail.load(), next_put);
}

TEST_F(ShmTest, FullRingSaysFullUntilTheConsumerIsDone) {
  auto ring = make_ring(16);
  auto prod = attach();
  ASSERT_TRUE(ring && prod);
  for (uint32_t k = 0; k < 16; ++k) ASSERT_EQ(put(*prod, make_pkt(3, k, 40)), ShmRing::Put::ok);
  EXPECT_EQ(put(*prod, make_pkt(3, 16, 40)), ShmRing::Put::full);
  EXPECT_EQ(ring->header().tail.load(), 16u);  // a refused put leaves no trace
  std::vector<RxPacket> rx(4);
  ASSERT_EQ(ring->take(rx), 4u);
  // Handed out, not yet given back: their slots are still taken.
  EXPECT_EQ(put(*prod, make_pkt(3, 16, 40)), ShmRing::Put::full);
  EXPECT_EQ(ring->take(std::span<RxPacket>()), 0u);  // gives the 4 back
  for (uint32_t k = 16; k < 20; ++k) ASSERT_EQ(put(*prod, make_pkt(3, k, 40)), ShmRing::Put::ok);
  EXPECT_EQ(put(*prod, make_pkt(3, 20, 40)), ShmRing::Put::full);
  std::vector<RxPacket> all(32);
  ASSERT_EQ(ring->take(all), 16u);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(parse(all[i].data).k, 4 + i);
}

// Consumes `total` packets of `producers` producers, checking each
// producer's order and every byte; false (with a message) on any mistake.
::testing::AssertionResult consume_all(ShmRing& ring, uint32_t producers, uint32_t per, std::chrono::seconds limit) {
  std::vector<uint32_t> next(producers, 0);
  std::vector<RxPacket> rx(64);
  uint64_t got = 0;
  const auto deadline = Clock::now() + limit;
  while (got < uint64_t(producers) * per) {
    if (Clock::now() > deadline) return ::testing::AssertionFailure() << "timed out after " << got << " packets";
    const size_t n = ring.take(rx);
    if (n == 0) std::this_thread::yield();
    for (size_t i = 0; i < n; ++i, ++got) {
      const Parsed p = parse(rx[i].data);
      if (!p.intact || p.who >= producers)
        return ::testing::AssertionFailure() << "packet " << got << " damaged (who " << p.who << ")";
      if (p.k != next[p.who])
        return ::testing::AssertionFailure() << "producer " << p.who << ": got " << p.k << ", expected " << next[p.who];
      ++next[p.who];
    }
  }
  if (ring.take(rx) != 0) return ::testing::AssertionFailure() << "more packets than were sent";
  return ::testing::AssertionSuccess();
}

// Puts packets 0..n-1 of `who`, waiting while the ring is full.
bool produce(ShmRing& r, uint32_t who, uint32_t n) {
  const auto deadline = Clock::now() + 30s;
  for (uint32_t k = 0; k < n;) {
    switch (put(r, make_pkt(who, k, len_for(k)))) {
      case ShmRing::Put::ok: ++k; break;
      case ShmRing::Put::full:
        if (Clock::now() > deadline) return false;
        std::this_thread::yield();
        break;
      case ShmRing::Put::lost:
      case ShmRing::Put::too_big: return false;
    }
  }
  return true;
}

TEST_F(ShmTest, ProducerThreadsExactCountsAndOrder) {
  auto ring = make_ring(256);
  ASSERT_TRUE(ring);
  constexpr uint32_t kProducers = 4, kPer = 20000;
  std::vector<std::unique_ptr<ShmRing>> maps;
  for (uint32_t i = 0; i < kProducers; ++i) maps.push_back(attach());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < kProducers; ++i)
    threads.emplace_back([&, i] { ok += produce(*maps[i % 2], i, kPer); });  // two threads per mapping
  EXPECT_TRUE(consume_all(*ring, kProducers, kPer, 60s));
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), int(kProducers));
  EXPECT_EQ(ring->rx_packets(), uint64_t(kProducers) * kPer);
  EXPECT_EQ(ring->skipped(), 0u);
}

TEST_F(ShmTest, ProducerProcessesExactCountsAndOrder) {
  auto ring = make_ring(128);
  ASSERT_TRUE(ring);
  constexpr uint32_t kProducers = 3, kPer = 20000;
  std::vector<pid_t> kids;
  for (uint32_t i = 0; i < kProducers; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto r = ShmRing::attach(ring_path());  // a process of its own, mapping the file
      ::_exit(r.ok() && produce(**r, i, kPer) ? 0 : 1);
    }
    kids.push_back(pid);
  }
  const auto result = consume_all(*ring, kProducers, kPer, 60s);
  if (!result)
    for (pid_t k : kids) ::kill(k, SIGKILL);
  for (pid_t k : kids) {
    int st = -1;
    ::waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "producer status " << st;
  }
  EXPECT_TRUE(result);
  EXPECT_EQ(ring->rx_packets(), uint64_t(kProducers) * kPer);
}

TEST_F(ShmTest, DeadProducersSlotIsSkippedAndFreed) {
  auto ring = make_ring(8, 5ms, 60000ms);  // only death may end a stall here
  ASSERT_TRUE(ring);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto r = ShmRing::attach(ring_path());
    if (r.ok()) (void)(*r)->put_begin();  // reserve a slot, then die mid-write
    ::_exit(r.ok() ? 0 : 1);
  }
  int st = -1;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  auto prod = attach();
  ASSERT_TRUE(prod);
  for (uint32_t k = 0; k < 5; ++k) ASSERT_EQ(put(*prod, make_pkt(0, k, len_for(k))), ShmRing::Put::ok);
  // The consumer waits a little for the slot, then skips it.
  std::vector<RxPacket> rx(16);
  const auto t0 = Clock::now();
  size_t n = 0;
  while (n == 0 && Clock::now() - t0 < 5s) n = ring->take(rx);
  ASSERT_EQ(n, 5u);
  for (uint32_t k = 0; k < 5; ++k) EXPECT_EQ(parse(rx[k].data).k, k);
  EXPECT_EQ(ring->skipped(), 1u);
  EXPECT_EQ(ring->header().skipped.load(), 1u);
  EXPECT_GE(Clock::now() - t0, 5ms);
  // The dead slot was freed: the ring runs on for several laps.
  for (uint32_t k = 0; k < 40; ++k) {
    ASSERT_EQ(put(*prod, make_pkt(1, k, len_for(k))), ShmRing::Put::ok) << k;
    ASSERT_EQ(ring->take(rx), 1u);
    EXPECT_EQ(parse(rx[0].data).k, k);
  }
  EXPECT_EQ(ring->skipped(), 1u);
}

TEST_F(ShmTest, StalledLiveProducerLosesItsSlotAndFreesItLater) {
  auto ring = make_ring(8, 5ms, 30ms);
  auto late = attach();
  auto prod = attach();
  ASSERT_TRUE(ring && late && prod);
  const uint64_t pos = late->put_begin();  // alive (this process), but stalls
  ASSERT_NE(pos, UINT64_MAX);
  for (uint32_t k = 0; k < 3; ++k) ASSERT_EQ(put(*prod, make_pkt(0, k, len_for(k))), ShmRing::Put::ok);
  std::vector<RxPacket> rx(16);
  const auto t0 = Clock::now();
  size_t n = 0;
  while (n == 0 && Clock::now() - t0 < 5s) n = ring->take(rx);
  ASSERT_EQ(n, 3u);
  EXPECT_GE(Clock::now() - t0, 30ms);
  EXPECT_EQ(ring->skipped(), 1u);
  // The late producer finds out, and gives the slot back.
  EXPECT_EQ(late->put_commit(pos), ShmRing::Put::lost);
  for (uint32_t k = 0; k < 40; ++k) {
    ASSERT_EQ(put(*prod, make_pkt(1, k, len_for(k))), ShmRing::Put::ok) << k;
    ASSERT_EQ(ring->take(rx), 1u) << k;
    EXPECT_EQ(parse(rx[0].data).k, k);
  }
  EXPECT_EQ(ring->skipped(), 1u);
}

TEST_F(ShmTest, AttachRefusesWhatIsNotALiveRing) {
  EXPECT_EQ(ShmRing::attach(dir_ + "/none").status().code(), ENOENT);
  {
    FILE* f = std::fopen((dir_ + "/junk").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not a ring", f);
    std::fclose(f);
    ::chmod((dir_ + "/junk").c_str(), 0600);
  }
  EXPECT_EQ(ShmRing::attach(dir_ + "/junk").status().code(), EINVAL);
  auto ring = make_ring(8);
  ASSERT_TRUE(ring);
  ::chmod(ring_path().c_str(), 0644);
  EXPECT_EQ(ShmRing::attach(ring_path()).status().code(), EACCES);
  ::chmod(ring_path().c_str(), 0600);
  EXPECT_TRUE(ShmRing::attach(ring_path()).ok());
  ring.reset();  // closes and removes it
  EXPECT_EQ(ShmRing::attach(ring_path()).status().code(), ENOENT);
}

}  // namespace
}  // namespace uroce::net::shm_test
