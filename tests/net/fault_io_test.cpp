// FaultIo: the UROCE_FAULTS syntax, and each fault over a FakeNetwork:
// rates, determinism from the seed, the reorder bound, held packets released
// by time through wait_fd (nothing stranded), corruption of copies only,
// the opcode-class filter, GSO trains split.
#include "net/fault_io.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "net/fake_io.hpp"

namespace uroce::net {
namespace {

using Bytes = std::vector<uint8_t>;
using namespace std::chrono_literals;

const Endpoint kA{*IpAddr::parse("10.0.0.1"), 4791};
const Endpoint kB{*IpAddr::parse("10.0.0.2"), 4791};

constexpr uint8_t kSendOnly = 0x04;  // data class
constexpr uint8_t kAck = 0x11;       // ack class
constexpr uint8_t kReadReq = 0x0c;   // read class

// ------------------------------------------------------------------- syntax

TEST(FaultSyntax, TheDocumentedExample) {
  auto c = parse_faults("seed=7,drop=0.05,dup=0.01,reorder=0.02:8,delay=0.01:200us,corrupt=0.001,dir=both,ops=all");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->seed, 7u);
  for (const FaultRates* r : {&c->tx, &c->rx}) {
    EXPECT_DOUBLE_EQ(r->drop, 0.05);
    EXPECT_DOUBLE_EQ(r->dup, 0.01);
    EXPECT_DOUBLE_EQ(r->reorder, 0.02);
    EXPECT_EQ(r->reorder_max, 8u);
    EXPECT_DOUBLE_EQ(r->delay, 0.01);
    EXPECT_EQ(r->delay_max_us, 200u);
    EXPECT_DOUBLE_EQ(r->corrupt, 0.001);
  }
  EXPECT_EQ(c->ops, fault_ops::kAll);
  EXPECT_TRUE(c->any());
}

TEST(FaultSyntax, DirectionsPercentagesUnitsAndClasses) {
  auto c = parse_faults(" drop=5% , delay=0.5:2ms, rx.dup=0.25, tx.reorder=1:3 ,ops=data+ack");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->tx.drop, 0.05);  // dir defaults to tx
  EXPECT_DOUBLE_EQ(c->rx.drop, 0.0);
  EXPECT_EQ(c->tx.delay_max_us, 2000u);
  EXPECT_DOUBLE_EQ(c->rx.dup, 0.25);
  EXPECT_DOUBLE_EQ(c->tx.reorder, 1.0);
  EXPECT_EQ(c->tx.reorder_max, 3u);
  EXPECT_EQ(c->ops, fault_ops::kData | fault_ops::kAck);
  auto rx = parse_faults("dir=rx,drop=0.1,delay=1:1s");
  ASSERT_TRUE(rx.ok());
  EXPECT_FALSE(rx->tx.any());
  EXPECT_DOUBLE_EQ(rx->rx.drop, 0.1);
  EXPECT_EQ(rx->rx.delay_max_us, 1'000'000u);
  auto off = parse_faults("off");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->any());
  EXPECT_FALSE(parse_faults("")->any());
}

TEST(FaultSyntax, MistakesAreNamed) {
  for (const char* bad : {"drop=1.5", "drop=-0.1", "drop", "loss=0.1", "dir=up", "ops=data+writes", "reorder=0.1:0",
                          "delay=0.1:10years", "seed=x", "drop=0.1:5", "tx.flip=0.1"}) {
    auto c = parse_faults(bad);
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), EINVAL) << bad;
      EXPECT_NE(c.status().to_string().find("UROCE_FAULTS"), std::string::npos) << c.status().to_string();
    }
  }
}

TEST(FaultSyntax, ToStringReadsBack) {
  FaultConfig c;
  c.seed = 99;
  c.tx.drop = 0.2;
  c.tx.reorder = 0.1;
  c.tx.reorder_max = 5;
  c.rx.delay = 0.3;
  c.rx.delay_max_us = 1500;
  c.rx.corrupt = 0.001;
  c.tx.ce = 0.25;
  c.ops = fault_ops::kRead | fault_ops::kAtomic;
  auto back = parse_faults(to_string(c));
  ASSERT_TRUE(back.ok()) << to_string(c) << ": " << back.status().to_string();
  EXPECT_EQ(*back, c) << to_string(c);
}

// ------------------------------------------------------------------ packets

// A packet whose payload is a BTH-sized header of `opcode` and a sequence
// number, padded to `size` bytes.
Bytes make_pkt(uint8_t opcode, uint32_t seq, size_t size = 64) {
  Bytes b(size, 0);
  b[0] = opcode;
  std::memcpy(b.data() + 4, &seq, 4);
  for (size_t i = 8; i < size; ++i) b[i] = uint8_t(seq + i);
  return b;
}
uint32_t seq_of(std::span<const uint8_t> d) {
  uint32_t s;
  std::memcpy(&s, d.data() + 4, 4);
  return s;
}

struct Rig {
  std::shared_ptr<FakeNetwork> net = FakeNetwork::create();
  std::unique_ptr<FaultIo> a;   // faults here
  std::unique_ptr<PacketIo> b;  // plain, or with faults too
  explicit Rig(const FaultConfig& fa, std::optional<FaultConfig> fb = std::nullopt) {
    net->set_queue_limit(1 << 20);
    auto ia = net->attach(kA).value();
    a = std::move(FaultIo::wrap(std::move(ia), fa).value());
    std::unique_ptr<PacketIo> ib = std::move(net->attach(kB).value());
    if (fb) ib = std::move(FaultIo::wrap(std::move(ib), *fb).value());
    b = std::move(ib);
  }
  // Sends packets [first, first+n) of `opcode` from a to b, `batch` at a time.
  void send(uint32_t first, uint32_t n, uint8_t opcode = kSendOnly, size_t batch = 16, uint8_t tos = 0) {
    std::vector<Bytes> bufs;
    std::vector<TxPacket> pkts;
    for (uint32_t i = 0; i < n; i += uint32_t(batch)) {
      bufs.clear();
      pkts.clear();
      for (uint32_t j = i; j < std::min<uint32_t>(n, i + uint32_t(batch)); ++j)
        bufs.push_back(make_pkt(opcode, first + j));
      for (auto& b : bufs)
        pkts.push_back(TxPacket{kB,
                                std::span<const uint8_t>(b.data(), 12),
                                std::span<const uint8_t>(b.data() + 12, b.size() - 12),
                                {},
                                tos});
      a->send_batch(pkts);
    }
  }
  // Receives on b until `want` packets arrived or `ms` passed (waiting on
  // wait_fd, and letting a's held packets out through its recv_batch).
  std::vector<Bytes> recv(size_t want, int ms = 2000) {
    std::vector<Bytes> got;
    std::vector<RxPacket> rx(64);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
      a->recv_batch(rx);  // the sender's held packets leave when due
      const size_t n = b->recv_batch(rx);
      for (size_t i = 0; i < n; ++i) got.emplace_back(rx[i].data.begin(), rx[i].data.end());
      if (n == 0) {
        pollfd p[2] = {{a->wait_fd(), POLLIN, 0}, {b->wait_fd(), POLLIN, 0}};
        ::poll(p, 2, 5);
      }
    }
    return got;
  }
  std::vector<uint32_t> seqs(size_t want, int ms = 2000) {
    std::vector<uint32_t> s;
    for (const Bytes& b : recv(want, ms)) s.push_back(seq_of(b));
    return s;
  }
};

FaultConfig tx_only(FaultRates r, uint64_t seed = 1) {
  FaultConfig c;
  c.seed = seed;
  c.tx = r;
  return c;
}

TEST(FaultIo, DropRateIsWhatWasAskedAndCounted) {
  Rig r(tx_only({.drop = 0.05}));
  r.send(0, 20000);
  auto got = r.seqs(20000, 300);
  const FaultCounts c = r.a->stats().tx_faults;
  EXPECT_EQ(got.size() + c.dropped, 20000u);
  EXPECT_NEAR(double(c.dropped) / 20000, 0.05, 0.006);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(r.a->stats().tx_packets, got.size());  // the inner I/O saw only what was not dropped
}

TEST(FaultIo, SameSeedSameFatesOtherSeedOthers) {
  auto run = [](uint64_t seed) {
    Rig r(tx_only({.drop = 0.1, .dup = 0.05}, seed));
    r.send(0, 3000);
    return r.seqs(100000, 200);
  };
  auto x = run(7), y = run(7), z = run(8);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(FaultIo, DuplicatesArriveTwice) {
  Rig r(tx_only({.dup = 0.2}));
  r.send(0, 5000);
  const FaultCounts c = r.a->stats().tx_faults;
  auto got = r.seqs(5000 + c.duplicated);
  EXPECT_EQ(got.size(), 5000 + c.duplicated);
  EXPECT_NEAR(double(c.duplicated) / 5000, 0.2, 0.03);
  std::map<uint32_t, int> n;
  for (uint32_t s : got) ++n[s];
  EXPECT_EQ(n.size(), 5000u);
  for (auto [s, k] : n) EXPECT_LE(k, 2) << s;
}

TEST(FaultIo, ReorderStaysWithinItsBound) {
  constexpr uint32_t kMax = 5;
  constexpr uint32_t kN = 4000;
  Rig r(tx_only({.reorder = 0.3, .reorder_max = kMax}));
  r.send(0, kN, kSendOnly, kN);  // one call: only overtaking packets release held ones
  auto got = r.seqs(kN);
  ASSERT_EQ(got.size(), kN) << "a reordered packet was lost";
  EXPECT_GT(r.a->stats().tx_faults.reordered, 1000u);
  EXPECT_FALSE(std::is_sorted(got.begin(), got.end()));
  // Packets not held back pass in order, so a packet that arrives after a
  // later one was held back.  One held back falls behind at most kMax of the
  // packets that were not.
  std::vector<bool> held(kN, false);
  uint32_t hi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (i > 0 && got[i] < hi) held[got[i]] = true;
    hi = std::max(hi, got[i]);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!held[got[i]]) continue;
    uint32_t overtaken_by = 0;
    for (size_t j = 0; j < i; ++j) overtaken_by += got[j] > got[i] && !held[got[j]];
    EXPECT_LE(overtaken_by, kMax) << "packet " << got[i] << " arrived " << i;
    EXPECT_GE(overtaken_by, 1u) << "packet " << got[i];
  }
  std::vector<uint32_t> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(sorted[i], i);
}

TEST(FaultIo, ReorderedLastPacketIsReleasedByTime) {
  Rig r(tx_only({.reorder = 1.0, .reorder_max = 8}));
  r.send(0, 1);  // nothing follows to overtake it
  EXPECT_EQ(r.a->held(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  auto got = r.seqs(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_EQ(r.a->held(), 0u);
}

TEST(FaultIo, DelayedPacketsWakeTheWaiterAndNoneIsStranded) {
  // Receive-side delay: wait_fd must poll readable when a held packet is
  // due even though the wire (the inner fd) has nothing new.
  FaultConfig fb;
  fb.rx = {.delay = 1.0, .delay_max_us = 3000};
  FaultConfig none;
  Rig r(none, fb);
  r.send(0, 200);
  std::vector<RxPacket> rx(64);
  std::vector<uint32_t> got;
  const auto t0 = std::chrono::steady_clock::now();
  while (got.size() < 200 && std::chrono::steady_clock::now() - t0 < 2s) {
    pollfd p{r.b->wait_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 1000), 1) << "held packets but wait_fd never became readable; got " << got.size();
    const size_t n = r.b->recv_batch(rx);
    for (size_t i = 0; i < n; ++i) got.push_back(seq_of(rx[i].data));
  }
  EXPECT_EQ(got.size(), 200u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  auto* fio = static_cast<FaultIo*>(r.b.get());
  EXPECT_EQ(fio->stats().rx_faults.delayed, 200u);
  EXPECT_EQ(fio->held(), 0u);
  EXPECT_FALSE(std::is_sorted(got.begin(), got.end()));
}

TEST(FaultIo, DelayedSendsLeaveWhenDue) {
  // Delays up to 200 ms: sending 50 takes far less, even under a sanitizer
  // on a loaded machine (with 2 ms, a TSan run beside a build had 38 due
  // before the check).
  Rig r(tx_only({.delay = 1.0, .delay_max_us = 200000}));
  r.send(0, 50);
  EXPECT_GT(r.a->held(), 30u);  // (a short delay may have passed between the batches)
  // Nobody sends again: the sender's wait_fd wakes its poller, whose
  // recv_batch sends what is due.
  std::vector<RxPacket> rx(64);
  const auto t0 = std::chrono::steady_clock::now();
  while (r.a->held() > 0 && std::chrono::steady_clock::now() - t0 < 3s) {
    pollfd p{r.a->wait_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 1000), 1);
    EXPECT_EQ(r.a->recv_batch(rx), 0u);
  }
  EXPECT_EQ(r.a->held(), 0u);
  EXPECT_EQ(r.seqs(50).size(), 50u);
}

TEST(FaultIo, CorruptionFlipsOneByteOfACopy) {
  Rig r(tx_only({.corrupt = 1.0}));
  Bytes orig = make_pkt(kSendOnly, 42, 300);
  Bytes app = orig;  // "application memory" the body points to
  TxPacket p{kB, std::span<const uint8_t>(app.data(), 12), std::span<const uint8_t>(app.data() + 12, 288), {}, 0};
  ASSERT_EQ(r.a->send_batch({&p, 1}), 1u);
  EXPECT_EQ(app, orig) << "the sender's memory was modified";
  auto got = r.recv(1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), orig.size());
  int diff = 0;
  for (size_t i = 0; i < orig.size(); ++i) diff += got[0][i] != orig[i];
  EXPECT_EQ(diff, 1);
  EXPECT_EQ(r.a->stats().tx_faults.corrupted, 1u);
}

TEST(FaultIo, ReceiveSideCorruptionDuplicationAndDrop) {
  FaultConfig fb;
  fb.seed = 3;
  fb.rx = {.drop = 0.1, .dup = 0.1, .corrupt = 0.1};
  Rig r(FaultConfig{}, fb);
  r.send(0, 3000);
  auto* fio = static_cast<FaultIo*>(r.b.get());
  auto got = r.recv(100000, 200);
  const FaultCounts c = fio->stats().rx_faults;
  EXPECT_EQ(got.size(), 3000 - c.dropped + c.duplicated);
  size_t bad = 0;
  for (const Bytes& g : got) bad += g != make_pkt(kSendOnly, seq_of(g)) ? 1 : 0;
  EXPECT_GT(c.corrupted, 200u);
  // A corrupted packet that is duplicated arrives corrupted twice; one whose
  // sequence number bytes were hit is compared against another packet.
  EXPECT_GE(bad, c.corrupted);
}

// Receives on b until `want` packets arrived; the ECN field of each.
std::vector<uint8_t> ecn_of(Rig& r, size_t want) {
  std::vector<uint8_t> ecn;
  std::vector<RxPacket> rx(64);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ecn.size() < want && std::chrono::steady_clock::now() < deadline) {
    const size_t n = r.b->recv_batch(rx);
    for (size_t i = 0; i < n; ++i) ecn.push_back(rx[i].tos & 3);
    if (n == 0) {
      pollfd p{r.b->wait_fd(), POLLIN, 0};
      ::poll(&p, 1, 5);
    }
  }
  return ecn;
}

TEST(FaultIo, CeMarksEcnCapablePacketsOnly) {
  Rig r(tx_only({.ce = 0.3}));
  r.send(0, 5000, kSendOnly, 16, 0x02);     // ECT(0)
  r.send(5000, 1000, kSendOnly, 16, 0x00);  // Not-ECT: never marked
  const std::vector<uint8_t> ecn = ecn_of(r, 6000);
  ASSERT_EQ(ecn.size(), 6000u);
  size_t ce = 0;
  for (size_t i = 0; i < 5000; ++i) {
    ASSERT_TRUE(ecn[i] == 2 || ecn[i] == 3) << i;
    ce += ecn[i] == 3;
  }
  for (size_t i = 5000; i < 6000; ++i) ASSERT_EQ(ecn[i], 0) << i;
  EXPECT_EQ(r.a->stats().tx_faults.ce_marked, ce);
  EXPECT_NEAR(double(ce) / 5000, 0.3, 0.03);
}

TEST(FaultIo, ReceiveSideCeMarking) {
  FaultConfig fb;
  fb.rx.ce = 1.0;
  Rig r(FaultConfig{}, fb);
  r.send(0, 100, kSendOnly, 16, 0x01);  // ECT(1)
  const std::vector<uint8_t> ecn = ecn_of(r, 100);
  ASSERT_EQ(ecn.size(), 100u);
  for (uint8_t e : ecn) EXPECT_EQ(e, 3);
  EXPECT_EQ(static_cast<FaultIo*>(r.b.get())->stats().rx_faults.ce_marked, 100u);
}

// CE marking draws on bits no other fault reads: a seed's drops stay the same.
TEST(FaultIo, CeMarkingLeavesTheOtherFatesOfASeedAlone) {
  auto run = [](double ce) {
    Rig r(tx_only({.drop = 0.1, .dup = 0.05, .ce = ce}, 5));
    r.send(0, 3000, kSendOnly, 16, 0x02);
    return r.seqs(100000, 200);
  };
  EXPECT_EQ(run(0), run(0.5));
}

TEST(FaultIo, OnlyTheChosenClassesAreHit) {
  FaultConfig c = tx_only({.drop = 1.0});
  c.ops = fault_ops::kAck;
  Rig r(c);
  r.send(0, 100, kSendOnly);
  r.send(100, 100, kAck);
  r.send(200, 100, kReadReq);
  auto got = r.seqs(300, 200);
  EXPECT_EQ(got.size(), 200u);
  for (uint32_t s : got) EXPECT_TRUE(s < 100 || s >= 200) << s;
  EXPECT_EQ(r.a->stats().tx_faults.dropped, 100u);
  EXPECT_EQ(fault_class(0x64, 40), fault_ops::kUd);
  EXPECT_EQ(fault_class(0x12, 40), fault_ops::kAtomic);
  EXPECT_EQ(fault_class(0x14, 40), fault_ops::kAtomic);
  EXPECT_EQ(fault_class(0x10, 40), fault_ops::kRead);
  EXPECT_EQ(fault_class(0x2a, 40), fault_ops::kData);
  EXPECT_EQ(fault_class(0x81, 40), fault_ops::kOther);
  EXPECT_EQ(fault_class(0x04, 4), fault_ops::kOther);
}

// A PacketIo that says it sends GSO trains and records what it is handed.
class TrainIo final : public PacketIo {
 public:
  Endpoint local() const noexcept override { return kA; }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override {
    for (const auto& p : pkts) gso.push_back(p.gso_segments);
    return pkts.size();
  }
  size_t recv_batch(std::span<RxPacket>) noexcept override { return 0; }
  int wait_fd() const noexcept override { return efd.get(); }
  size_t max_payload() const noexcept override { return 4160; }
  uint16_t gso_max_segments() const noexcept override { return 64; }
  IoStats stats() const noexcept override { return {}; }
  bool host_local(const IpAddr&) noexcept override { return true; }  // as UDP to 127.0.0.2 is
  std::vector<uint16_t> gso;
  UniqueFd efd{::eventfd(0, EFD_NONBLOCK)};
};

TEST(FaultIo, TrainsAreSplitWhileSendsAreInjected) {
  auto inner = std::make_unique<TrainIo>();
  TrainIo* t = inner.get();
  auto quiet = FaultIo::wrap(std::make_unique<TrainIo>(), FaultConfig{.rx = {.drop = 0.5}});
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ((*quiet)->gso_max_segments(), 64) << "no send faults: trains stay";
  auto f = FaultIo::wrap(std::move(inner), tx_only({.dup = 0.0001}));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->gso_max_segments(), 0);
  Bytes b = make_pkt(kSendOnly, 1, 100);
  TxPacket p[3] = {{kB, b, {}, {}, 0, 3}, {kB, b, {}, {}, 0, 0}, {kB, b, {}, {}, 0, 0}};
  EXPECT_EQ((*f)->send_batch(p), 3u);
  for (uint16_t g : t->gso) EXPECT_EQ(g, 0);
}

// With faults configured a FaultIo stands for a network, whatever its inner
// I/O says of the destination; without, it says what the inner one does.
TEST(FaultIo, ANetworkWithFaultsIsNeverHostLocal) {
  const IpAddr lo = *IpAddr::parse("127.0.0.2");
  auto quiet = FaultIo::wrap(std::make_unique<TrainIo>(), FaultConfig{});
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE((*quiet)->host_local(lo));
  auto rx = FaultIo::wrap(std::make_unique<TrainIo>(), FaultConfig{.rx = {.drop = 0.5}});
  auto tx = FaultIo::wrap(std::make_unique<TrainIo>(), tx_only({.dup = 0.0001}));
  ASSERT_TRUE(rx.ok() && tx.ok());
  EXPECT_FALSE((*rx)->host_local(lo));
  EXPECT_FALSE((*tx)->host_local(lo));
}

TEST(FaultIo, FromEnvironment) {
  ::setenv("UROCE_FAULTS", "seed=5,drop=0.5", 1);
  auto c = FaultIo::from_env();
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->seed, 5u);
  ::setenv("UROCE_FAULTS", "drop=2", 1);
  EXPECT_FALSE(FaultIo::from_env().ok());
  ::setenv("UROCE_FAULTS", "off", 1);
  EXPECT_FALSE(FaultIo::from_env()->has_value());
  ::unsetenv("UROCE_FAULTS");
  EXPECT_FALSE(FaultIo::from_env()->has_value());
}

}  // namespace
}  // namespace uroce::net
