// UDP GSO trains and GRO datagrams: a train leaves as one send and arrives
// as packets whose IPv4 IDs count up from 0 (so each packet's ICRC, computed
// for that ID, is valid on the wire), or, at a GRO socket, as one datagram
// that recv_batch cuts back into the packets with their ID hints.
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <vector>

#include "net/udp_io.hpp"
#include "wire/headers.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::net {
namespace {

using Bytes = std::vector<uint8_t>;
const IpAddr kLo4 = *IpAddr::parse("127.0.0.1");

std::unique_ptr<UdpIo> open_io(bool gso) {
  UdpConfig cfg;
  cfg.local = kLo4;
  cfg.port = 0;
  cfg.gso = gso;
  auto r = UdpIo::open(cfg);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// A train of RC SEND_MIDDLE packets (the last one shorter), each with the
// ICRC for IPv4 ID = its index, ready to go as one GSO send.
struct Train {
  std::vector<Bytes> pkts;
  std::vector<TxPacket> tx;
  Train(const UdpIo& from, const UdpIo& to, size_t n, size_t payload, size_t last_payload) {
    for (size_t i = 0; i < n; ++i) {
      wire::Headers h;
      h.bth.opcode = uint8_t(wire::Opcode::rc_send_middle);
      h.bth.dest_qp = 0x4002;
      h.bth.psn = uint32_t(100 + i);
      const size_t len = i + 1 == n ? last_payload : payload;
      Bytes p(wire::kMaxHeaderLen + len + wire::kIcrcLen);
      const size_t hl = wire::encode_headers(h, p);
      for (size_t k = 0; k < len; ++k) p[hl + k] = uint8_t(i * 7 + k);
      p.resize(hl + len + wire::kIcrcLen);
      wire::IpUdpFields ip{from.local().addr, to.local().addr, from.local().port, to.local().port, uint16_t(i), 0x4000};
      wire::put_icrc(wire::compute_icrc(ip, p), p.data() + p.size() - 4);
      pkts.push_back(std::move(p));
    }
    for (auto& p : pkts) tx.push_back(TxPacket{to.local(), p, {}, {}, 0});
    tx[0].gso_segments = uint16_t(n);
  }
};

std::vector<std::pair<Bytes, uint16_t>> recv_n(UdpIo& io, size_t n) {
  std::vector<std::pair<Bytes, uint16_t>> got;
  std::vector<RxPacket> rx(8);  // small on purpose: a GRO datagram spans calls
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{io.wait_fd(), POLLIN, 0};
    ::poll(&p, 1, 20);
    const size_t k = io.recv_batch(rx);
    for (size_t i = 0; i < k; ++i) got.emplace_back(Bytes(rx[i].data.begin(), rx[i].data.end()), rx[i].ipv4_id_hint);
  }
  return got;
}

TEST(UdpGso, ReportsTrainLength) {
  auto on = open_io(true), off = open_io(false);
  ASSERT_TRUE(on && off);
  EXPECT_EQ(on->gso_max_segments(), kMaxGsoSegments);
  EXPECT_EQ(off->gso_max_segments(), 0);
}

TEST(UdpGso, TrainArrivesAsPacketsWithCountingIpIds) {
  auto tx = open_io(true), rx = open_io(false);  // no GRO: the kernel cuts the train
  ASSERT_TRUE(tx && rx);
  Train t(*tx, *rx, 10, 1024, 100);
  ASSERT_EQ(tx->send_batch(t.tx), 10u);
  auto got = recv_n(*rx, 10);
  ASSERT_EQ(got.size(), 10u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, t.pkts[i]) << "packet " << i;
    EXPECT_EQ(got[i].second, 0) << "a lone datagram has no ID hint";
    // The receiver cannot see the IPv4 ID: solving the ICRC for it must give i.
    wire::IpUdpFields ip{tx->local().addr, rx->local().addr, tx->local().port, rx->local().port, 0, 0x4000};
    uint16_t id = 0xffff;
    const auto check = wire::verify_icrc(ip, got[i].first, &id);
    EXPECT_NE(check, wire::IcrcCheck::bad) << "packet " << i;
    EXPECT_EQ(id, i) << "the kernel gave segment " << i << " another IPv4 ID";
  }
}

TEST(UdpGso, GroDatagramIsCutBackIntoPackets) {
  auto tx = open_io(true), rx = open_io(true);
  ASSERT_TRUE(tx && rx);
  Train t(*tx, *rx, 20, 256, 40);
  ASSERT_EQ(tx->send_batch(t.tx), 20u);
  auto got = recv_n(*rx, 20);
  ASSERT_EQ(got.size(), 20u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, t.pkts[i]) << "packet " << i;
    EXPECT_EQ(got[i].second, i) << "packet " << i << " of a GRO datagram";
    wire::IpUdpFields ip{tx->local().addr, rx->local().addr, tx->local().port, rx->local().port, got[i].second, 0x4000};
    EXPECT_EQ(wire::verify_icrc(ip, got[i].first), wire::IcrcCheck::ok) << "packet " << i;
  }
  EXPECT_EQ(rx->stats().rx_packets, 20u);
}

}  // namespace
}  // namespace uroce::net
