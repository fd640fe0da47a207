// The ICRC between same-host peers (net::PendingIcrc, kRingTakesNoIcrc):
// the transport leaves a packet's ICRC to the I/O, which leaves it out only
// for a ring whose owner says it takes packets without one, and computes it
// for every other path: a ring that checks it, UDP, a trace, a packet a
// fault injector flips a byte of.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "net/pcap_io.hpp"
#include "shm_fixture.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"

namespace uroce::net::shm_test {
namespace {

constexpr uint8_t kUnwritten = 0xEE;  // the ICRC bytes before anyone computes them

// A SEND ONLY of 13 payload bytes (3 bytes of pad) from `from` to `to`, as
// the transport hands it over: head | body | pad + ICRC, the ICRC pending.
struct Pending {
  Bytes want;  // the packet as a wire must carry it, ICRC included
  Bytes head, body, tail;
  PendingIcrc icrc;
  TxPacket tx;
};

void make_pending(Pending& p, const Endpoint& from, const Endpoint& to) {
  wire::Headers h;
  h.bth.opcode = 0x04;  // RC SEND ONLY
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = 0x1234;
  h.bth.psn = 9;
  Bytes payload(13);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 7 + 1);
  const wire::IpUdpFields ip{from.addr, to.addr, from.port, to.port, 0, 0x4000};
  p.want = test::make_udp_payload(h, payload, ip);
  ASSERT_EQ(p.want.size(), 12u + 13 + 3 + 4);
  p.head.assign(p.want.begin(), p.want.begin() + 12);
  p.body.assign(p.want.begin() + 12, p.want.begin() + 25);
  p.tail.assign(p.want.begin() + 25, p.want.end());
  std::fill(p.tail.end() - 4, p.tail.end(), kUnwritten);
  p.icrc = PendingIcrc{ip, p.tail.data() + 3};
  p.tx.dst = to;
  p.tx.head = p.head;
  p.tx.body = p.body;
  p.tx.tail = p.tail;
  p.tx.icrc = &p.icrc;
}

// Receives one packet within 3 s (a copy of its bytes and its metadata).
std::pair<Bytes, RxPacket> recv_one(PacketIo& io) {
  std::vector<RxPacket> rx(4);
  for (const auto t0 = Clock::now(); Clock::now() - t0 < 3s;) {
    if (io.recv_batch(rx) > 0) return {Bytes(rx[0].data.begin(), rx[0].data.end()), rx[0]};
    std::this_thread::yield();
  }
  ADD_FAILURE() << "nothing received";
  return {};
}

// What the NIC's receive path checks (Nic::icrc_ok).
wire::IcrcCheck check(const std::pair<Bytes, RxPacket>& got, const Endpoint& to) {
  const wire::IpUdpFields ip{got.second.src.addr, got.second.dst, got.second.src.port, to.port, 0, 0x4000};
  return wire::verify_icrc(ip, got.first);
}

Bytes without_icrc(const Bytes& b) { return Bytes(b.begin(), b.end() - 4); }

TEST_F(ShmTest, ARingThatTakesNoIcrcGetsThePacketWithoutOne) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  b->advertise(kRingTakesNoIcrc);
  Pending p;
  make_pending(p, a->local(), b->local());
  ASSERT_EQ(a->send_batch({&p.tx, 1}), 1u);
  const auto got = recv_one(*b);
  EXPECT_TRUE(got.second.via_ring);
  EXPECT_TRUE(got.second.icrc_omitted);
  ASSERT_EQ(got.first.size(), p.want.size());
  EXPECT_EQ(without_icrc(got.first), without_icrc(p.want));
  EXPECT_EQ(Bytes(p.tail.end() - 4, p.tail.end()), Bytes(4, kUnwritten)) << "no ICRC was computed";
  EXPECT_EQ(b->udp().stats().rx_packets, 0u);
}

TEST_F(ShmTest, ARingThatChecksIcrcsGetsTheComputedOne) {
  auto a = open_io(), b = open_io();
  ASSERT_TRUE(a && b);
  b->advertise(kRingTakesCopy);  // (an owner that says nothing of ICRCs)
  Pending p;
  make_pending(p, a->local(), b->local());
  ASSERT_EQ(a->send_batch({&p.tx, 1}), 1u);
  const auto got = recv_one(*b);
  EXPECT_TRUE(got.second.via_ring);
  EXPECT_FALSE(got.second.icrc_omitted);
  EXPECT_EQ(got.first, p.want);
  EXPECT_EQ(check(got, b->local()), wire::IcrcCheck::ok);
}

TEST_F(ShmTest, AUdpPeerGetsTheComputedIcrc) {
  auto a = open_io();
  ASSERT_TRUE(a);
  auto plain = open_plain();
  ASSERT_TRUE(plain);
  Pending p;
  make_pending(p, a->local(), plain->local());
  ASSERT_EQ(a->send_batch({&p.tx, 1}), 1u);
  const auto got = recv_one(*plain);
  EXPECT_FALSE(got.second.via_ring);
  EXPECT_FALSE(got.second.icrc_omitted);
  EXPECT_EQ(got.first, p.want);
}

// Both ends traced: the sender's record and the receiver's carry the ICRC
// the ring went without, and check from the frame alone.
TEST_F(ShmTest, TracesOfARingPacketCarryItsIcrc) {
  const std::string tx_trace = dir_ + "/tx.pcap", rx_trace = dir_ + "/rx.pcap";
  auto a0 = open_io(), b0 = open_io();
  ASSERT_TRUE(a0 && b0);
  const Endpoint from = a0->local(), to = b0->local();
  auto b = PcapIo::wrap(std::move(b0), rx_trace);
  auto a = PcapIo::wrap(std::move(a0), tx_trace);
  ASSERT_TRUE(a.ok() && b.ok());
  (*b)->advertise(kRingTakesNoIcrc);
  Pending p;
  make_pending(p, from, to);
  ASSERT_EQ((*a)->send_batch({&p.tx, 1}), 1u);
  const auto got = recv_one(**b);
  EXPECT_EQ(got.first, p.want) << "a traced sender computes the ICRC for its trace; the packet carries it";

  // An untraced sender leaves it out; the receiver's trace fills it in.
  auto c = open_io();
  ASSERT_TRUE(c);
  Pending q;
  make_pending(q, c->local(), to);
  ASSERT_EQ(c->send_batch({&q.tx, 1}), 1u);
  const auto got2 = recv_one(**b);
  EXPECT_TRUE(got2.second.icrc_omitted);
  a->reset();
  b->reset();
  for (const auto& [path, n] : {std::pair{tx_trace, 1u}, std::pair{rx_trace, 2u}}) {
    SCOPED_TRACE(path);
    auto f = test::read_pcap(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ(f->frames.size(), size_t(n));
    for (size_t i = 0; i < n; ++i) {
      auto l3 = test::strip_link(f->linktype, f->frames[i].data);
      ASSERT_TRUE(l3.has_value());
      auto ip = wire::parse_ip_udp(*l3);
      ASSERT_TRUE(ip.has_value());
      EXPECT_EQ(Bytes(ip->udp_payload.begin(), ip->udp_payload.end()), i == 0 ? p.want : q.want);
      EXPECT_EQ(wire::verify_icrc(ip->fields, ip->udp_payload), wire::IcrcCheck::ok);
    }
    std::remove(path.c_str());
  }
}

// A byte flipped on either side makes the packet one whose ICRC is checked
// (and fails): never a ring packet taken on trust.
TEST_F(ShmTest, APacketAFaultCorruptsHasItsIcrcChecked) {
  for (const bool on_send : {true, false}) {
    SCOPED_TRACE(on_send ? "corrupted as sent" : "corrupted as received");
    auto a0 = open_io(), b0 = open_io();
    ASSERT_TRUE(a0 && b0);
    const Endpoint from = a0->local(), to = b0->local();
    b0->advertise(kRingTakesNoIcrc);
    FaultConfig fc;
    fc.seed = 5;
    (on_send ? fc.tx : fc.rx).corrupt = 1.0;
    std::unique_ptr<PacketIo> a = std::move(a0), b = std::move(b0);
    auto wrapped = FaultIo::wrap(std::move(on_send ? a : b), fc);
    ASSERT_TRUE(wrapped.ok()) << wrapped.status().to_string();
    (on_send ? a : b) = std::move(*wrapped);
    Pending p;
    make_pending(p, from, to);
    ASSERT_EQ(a->send_batch({&p.tx, 1}), 1u);
    const auto got = recv_one(*b);
    EXPECT_TRUE(got.second.via_ring);
    EXPECT_FALSE(got.second.icrc_omitted);
    ASSERT_EQ(got.first.size(), p.want.size());
    EXPECT_NE(got.first, p.want);
    // (On receipt the ICRC bytes are still the unwritten ones: only the
    // mark being cleared says anything there.)
    if (on_send) {
      EXPECT_EQ(check(got, to), wire::IcrcCheck::bad);
    }
  }
}

}  // namespace
}  // namespace uroce::net::shm_test
