// PcapIo: the packet trace (UROCE_PCAP).  Every datagram sent and received
// is one record, as the Ethernet frame it was: the file header once, the
// IP and UDP headers exact (lengths, checksums, ports, TOS, the IPv4 ID a
// sent packet's ICRC covers -- i for packet i of a GSO train -- and the one
// a received packet's ICRC was computed with), the RoCEv2 bytes unchanged,
// so that the ICRC checks from the frame alone.
#include "net/pcap_io.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "net/fake_io.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "support/scoped_env.hpp"
#include "wire/bytes.hpp"

namespace uroce::net {
namespace {

using Bytes = std::vector<uint8_t>;

const Endpoint kA{*IpAddr::parse("10.0.0.1"), 4791};
const Endpoint kB{*IpAddr::parse("10.0.0.2"), 4791};

// A SEND ONLY of `n` payload bytes (value `fill`) whose ICRC covers `ip`.
Bytes roce_packet(const wire::IpUdpFields& ip, size_t n, uint8_t fill) {
  wire::Headers h;
  h.bth.opcode = 0x04;  // RC SEND ONLY
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = 0x1234;
  h.bth.ack_req = true;
  h.bth.psn = 7;
  return test::make_udp_payload(h, Bytes(n, fill), ip);
}

// The trace's frames, each taken apart down to its UDP payload.
struct Traced {
  test::PcapFile file;
  std::vector<wire::ParsedIpUdp> ip;  // spans into `file`
};

Traced read_trace(const std::string& path) {
  Traced t;
  auto f = test::read_pcap(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return t;
  t.file = std::move(*f);
  for (const test::PcapFrame& fr : t.file.frames) {
    auto l3 = test::strip_link(t.file.linktype, fr.data);
    EXPECT_TRUE(l3.has_value());
    auto p = l3 ? wire::parse_ip_udp(*l3) : std::nullopt;
    EXPECT_TRUE(p.has_value());
    if (p) t.ip.push_back(*p);
  }
  return t;
}

class PcapIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/uroce-pcap-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = tmpl;
    path = dir + "/trace.pcap";
  }
  void TearDown() override {
    std::remove(path.c_str());
    ::rmdir(dir.c_str());
  }
  std::string dir, path;
};

TEST_F(PcapIoTest, SentAndReceivedPacketsAreExactFramesWhoseIcrcChecks) {
  auto net = FakeNetwork::create();
  auto a = PcapIo::wrap(std::move(net->attach(kA).value()), path);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = std::move(net->attach(kB).value());

  // A sends a GSO train of three packets (IDs 0, 1, 2) and one alone (ID 0).
  std::vector<Bytes> sent;
  for (uint16_t i = 0; i < 4; ++i) {
    wire::IpUdpFields ip{kA.addr, kB.addr, kA.port, kB.port, uint16_t(i < 3 ? i : 0), 0x4000};
    sent.push_back(roce_packet(ip, i < 3 ? 1024 : 100, uint8_t(0x10 + i)));
  }
  std::vector<TxPacket> tx(4);
  for (size_t i = 0; i < 4; ++i) {
    tx[i].dst = kB;
    tx[i].head = std::span(sent[i]).first(12);
    tx[i].body = std::span(sent[i]).subspan(12, sent[i].size() - 16);
    tx[i].tail = std::span(sent[i]).last(4);
    tx[i].tos = 0x02;  // ECT(0)
  }
  tx[0].gso_segments = 3;
  ASSERT_EQ((*a)->send_batch(tx), 4u);

  // B answers with one packet whose ICRC covers IPv4 ID 0x2345: the trace
  // of A's receive carries that ID.
  wire::IpUdpFields back{kB.addr, kA.addr, kB.port, kA.port, 0x2345, 0x4000};
  const Bytes reply = roce_packet(back, 40, 0x77);
  TxPacket r;
  r.dst = kA;
  r.head = reply;
  ASSERT_EQ(b->send_batch({&r, 1}), 1u);
  RxPacket rx[4];
  ASSERT_EQ((*a)->recv_batch(rx), 1u);

  const Traced t = read_trace(path);
  EXPECT_TRUE(t.file.nanosecond);
  EXPECT_EQ(t.file.linktype, test::kLinktypeEthernet);
  ASSERT_EQ(t.ip.size(), 5u);
  const uint16_t want_id[5] = {0, 1, 2, 0, 0x2345};
  for (size_t i = 0; i < 5; ++i) {
    const Bytes& payload = i < 4 ? sent[i] : reply;
    const wire::ParsedIpUdp& ip = t.ip[i];
    const Bytes& frame = t.file.frames[i].data;
    SCOPED_TRACE(i);
    EXPECT_EQ(frame.size(), 14 + 20 + 8 + payload.size());
    EXPECT_EQ(t.file.frames[i].orig_len, frame.size());
    EXPECT_EQ(wire::load_be16(&frame[12]), 0x0800);
    EXPECT_EQ(ip.fields.src, i < 4 ? kA.addr : kB.addr);
    EXPECT_EQ(ip.fields.dst, i < 4 ? kB.addr : kA.addr);
    EXPECT_EQ(ip.fields.src_port, 4791);
    EXPECT_EQ(ip.fields.dst_port, 4791);
    EXPECT_EQ(ip.variant.tos, i < 4 ? 0x02 : 0x00);  // TOS as sent; FakeIo delivers none
    EXPECT_EQ(ip.fields.ipv4_id, want_id[i]);
    EXPECT_EQ(ip.fields.ipv4_frag, 0x4000);  // DF
    EXPECT_EQ(wire::ipv4_header_checksum(std::span(frame).subspan(14, 20)), 0);
    EXPECT_EQ(Bytes(ip.udp_payload.begin(), ip.udp_payload.end()), payload);
    EXPECT_EQ(wire::verify_icrc(ip.fields, ip.udp_payload), wire::IcrcCheck::ok);
  }
}

TEST_F(PcapIoTest, TwoWritersShareOneFileWithOneHeader) {
  auto net = FakeNetwork::create();
  auto a = PcapIo::wrap(std::move(net->attach(kA).value()), path);
  auto b = PcapIo::wrap(std::move(net->attach(kB).value()), path);
  ASSERT_TRUE(a.ok() && b.ok());
  wire::IpUdpFields ip{kA.addr, kB.addr, kA.port, kB.port, 0, 0x4000};
  const Bytes p = roce_packet(ip, 64, 1);
  TxPacket t;
  t.dst = kB;
  t.head = p;
  ASSERT_EQ((*a)->send_batch({&t, 1}), 1u);
  RxPacket rx[2];
  ASSERT_EQ((*b)->recv_batch(rx), 1u);
  const Traced tr = read_trace(path);
  ASSERT_EQ(tr.file.frames.size(), 2u);  // sent by A, received by B: the same frame
  EXPECT_EQ(tr.file.frames[0].data, tr.file.frames[1].data);
}

// UROCE_PCAP_COUNT: the first frames only (sent and received alike), the
// packets themselves still go through.
TEST_F(PcapIoTest, ACountedTraceStopsAfterItsFrames) {
  auto net = FakeNetwork::create();
  auto a = PcapIo::wrap(std::move(net->attach(kA).value()), path, 3);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = std::move(net->attach(kB).value());
  std::vector<Bytes> sent;
  std::vector<TxPacket> tx(2);
  for (uint8_t i = 0; i < 2; ++i) {
    wire::IpUdpFields ip{kA.addr, kB.addr, kA.port, kB.port, 0, 0x4000};
    sent.push_back(roce_packet(ip, 64, uint8_t(0x20 + i)));
    tx[i].dst = kB;
    tx[i].head = sent[i];
  }
  ASSERT_EQ((*a)->send_batch(tx), 2u);  // frames 1 and 2
  wire::IpUdpFields back{kB.addr, kA.addr, kB.port, kA.port, 0, 0x4000};
  const Bytes reply = roce_packet(back, 40, 0x77);
  TxPacket r;
  r.dst = kA;
  r.head = reply;
  RxPacket rx[4];
  for (int i = 0; i < 2; ++i) {  // frame 3, then none
    ASSERT_EQ(b->send_batch({&r, 1}), 1u);
    ASSERT_EQ((*a)->recv_batch(rx), 1u);
  }
  ASSERT_EQ((*a)->send_batch(tx), 2u);
  EXPECT_EQ((*a)->frames(), 3u);
  RxPacket brx[4];
  EXPECT_EQ(b->recv_batch(brx), 4u);  // all four sent arrived
  const Traced t = read_trace(path);
  ASSERT_EQ(t.ip.size(), 3u);
  EXPECT_EQ(Bytes(t.ip[0].udp_payload.begin(), t.ip[0].udp_payload.end()), sent[0]);
  EXPECT_EQ(Bytes(t.ip[1].udp_payload.begin(), t.ip[1].udp_payload.end()), sent[1]);
  EXPECT_EQ(Bytes(t.ip[2].udp_payload.begin(), t.ip[2].udp_payload.end()), reply);
}

// UROCE_PCAP_COUNT: digits only; anything else is EINVAL naming it.
TEST(PcapCount, EnvironmentTakesDigitsOnly) {
  test::ScopedEnv env("UROCE_PCAP_COUNT");
  EXPECT_EQ(pcap_count_from_env().value(), 0u);
  const std::pair<const char*, uint64_t> good[] = {{"0", 0}, {"20000", 20000}, {"18446744073709551615", ~uint64_t(0)}};
  for (const auto& [v, n] : good) {
    env.set(v);
    auto r = pcap_count_from_env();
    ASSERT_TRUE(r.ok()) << v;
    EXPECT_EQ(*r, n) << v;
  }
  for (const char* v : {"-1", "abc", "12x", " 5", "18446744073709551616"}) {
    env.set(v);
    auto r = pcap_count_from_env();
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.status().code(), EINVAL) << v;
    EXPECT_NE(r.status().to_string().find("UROCE_PCAP_COUNT"), std::string::npos) << r.status().to_string();
  }
}

TEST_F(PcapIoTest, AnUnwritablePathFailsWithItsErrno) {
  auto net = FakeNetwork::create();
  auto a = PcapIo::wrap(std::move(net->attach(kA).value()), dir + "/no/such/dir/trace.pcap");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ENOENT);
}

TEST(EthernetFrame, Ipv6CarriesAUdpChecksum) {
  const wire::IpUdpFields ip{*IpAddr::parse("fd00::1"), *IpAddr::parse("fd00::2"), 4791, 4791, 0, 0};
  const Bytes payload = {1, 2, 3, 4, 5};
  const std::span<const uint8_t> parts[] = {payload};
  Bytes v = {0xee};  // appended after what is there
  append_ethernet_frame(v, ip, {.tos = 0x02}, parts);
  ASSERT_EQ(v.size(), 1 + 14 + 40 + 8 + 5u);
  EXPECT_EQ(v[0], 0xee);
  EXPECT_EQ(wire::load_be16(&v[13]), 0x86dd);
  auto p = wire::parse_ip_udp(std::span(v).subspan(15));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->fields.src, ip.src);
  EXPECT_EQ(p->variant.tos, 0x02);
  EXPECT_EQ(Bytes(p->udp_payload.begin(), p->udp_payload.end()), payload);
  ASSERT_NE(p->udp_checksum, 0);
  Bytes udp(p->udp_datagram.begin(), p->udp_datagram.end());
  udp[6] = udp[7] = 0;
  EXPECT_EQ(wire::udp_checksum(ip, udp), p->udp_checksum);
}

}  // namespace
}  // namespace uroce::net
