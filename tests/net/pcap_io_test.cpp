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
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "net/fake_io.hpp"
#include "wire/icrc.hpp"

namespace uroce::net {
namespace {

using Bytes = std::vector<uint8_t>;

const Endpoint kA{*IpAddr::parse("10.0.0.1"), 4791};
const Endpoint kB{*IpAddr::parse("10.0.0.2"), 4791};

// A SEND ONLY of `n` payload bytes (value `fill`) whose ICRC covers `ip`.
Bytes roce_packet(const wire::IpUdpFields& ip, size_t n, uint8_t fill) {
  Bytes b(12 + n + 4, fill);
  b[0] = 0x04;  // RC SEND ONLY
  b[1] = 0x40;  // migration state, pad 0, version 0
  b[2] = 0xff;  // P_Key 0xffff
  b[3] = 0xff;
  b[4] = 0;
  b[5] = 0;
  b[6] = 0x12;  // destination QP 0x1234
  b[7] = 0x34;
  b[8] = 0x80;  // AckReq, PSN 7
  b[9] = 0;
  b[10] = 0;
  b[11] = 7;
  wire::put_icrc(wire::compute_icrc(ip, b), b.data() + b.size() - 4);
  return b;
}

struct Record {
  uint32_t caplen = 0, len = 0;
  Bytes frame;
};

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

std::vector<Record> read_pcap(const std::string& path, uint32_t* magic, uint32_t* link) {
  std::ifstream in(path, std::ios::binary);
  const Bytes d((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Record> out;
  if (d.size() < 24) return out;
  *magic = le32(d.data());
  *link = le32(d.data() + 20);
  for (size_t off = 24; off + 16 <= d.size();) {
    Record r;
    r.caplen = le32(d.data() + off + 8);
    r.len = le32(d.data() + off + 12);
    if (off + 16 + r.caplen > d.size()) break;
    r.frame.assign(d.begin() + long(off + 16), d.begin() + long(off + 16 + r.caplen));
    out.push_back(std::move(r));
    off += 16 + r.caplen;
  }
  return out;
}

// One's complement sum over the IPv4 header: 0xffff when its checksum is right.
uint16_t ip_sum(const uint8_t* h) {
  uint32_t s = 0;
  for (int i = 0; i < 20; i += 2) s += be16(h + i);
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(s);
}

// The IP/UDP fields an IPv4 frame carries, for the ICRC check.
wire::IpUdpFields fields_of(const Bytes& f) {
  wire::IpUdpFields ip;
  ip.src = IpAddr::from_v4(uint32_t(f[26]) << 24 | uint32_t(f[27]) << 16 | uint32_t(f[28]) << 8 | f[29]);
  ip.dst = IpAddr::from_v4(uint32_t(f[30]) << 24 | uint32_t(f[31]) << 16 | uint32_t(f[32]) << 8 | f[33]);
  ip.ipv4_id = be16(&f[18]);
  ip.ipv4_frag = be16(&f[20]);
  ip.src_port = be16(&f[34]);
  ip.dst_port = be16(&f[36]);
  return ip;
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

  uint32_t magic = 0, link = 0;
  const std::vector<Record> recs = read_pcap(path, &magic, &link);
  EXPECT_EQ(magic, 0xa1b23c4du);  // nanosecond timestamps
  EXPECT_EQ(link, 1u);            // Ethernet
  ASSERT_EQ(recs.size(), 5u);
  const uint16_t want_id[5] = {0, 1, 2, 0, 0x2345};
  for (size_t i = 0; i < 5; ++i) {
    const Bytes& f = recs[i].frame;
    const Bytes& payload = i < 4 ? sent[i] : reply;
    SCOPED_TRACE(i);
    ASSERT_EQ(f.size(), 14 + 20 + 8 + payload.size());
    EXPECT_EQ(recs[i].len, f.size());
    EXPECT_EQ(be16(&f[12]), 0x0800);
    EXPECT_EQ(f[14], 0x45);
    EXPECT_EQ(f[15], i < 4 ? 0x02 : 0x00);  // TOS as sent; FakeIo delivers none
    EXPECT_EQ(be16(&f[16]), 20 + 8 + payload.size());
    EXPECT_EQ(be16(&f[18]), want_id[i]);
    EXPECT_EQ(be16(&f[20]), 0x4000);  // DF
    EXPECT_EQ(f[23], 17);             // UDP
    EXPECT_EQ(ip_sum(&f[14]), 0xffff);
    EXPECT_EQ(be16(&f[36]), 4791);
    EXPECT_EQ(be16(&f[38]), 8 + payload.size());
    EXPECT_EQ(Bytes(f.begin() + 42, f.end()), payload);
    const wire::IpUdpFields ip = fields_of(f);
    EXPECT_EQ(ip.src, i < 4 ? kA.addr : kB.addr);
    EXPECT_EQ(wire::verify_icrc(ip, std::span(f).subspan(42)), wire::IcrcCheck::ok);
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
  uint32_t magic = 0, link = 0;
  const std::vector<Record> recs = read_pcap(path, &magic, &link);
  ASSERT_EQ(recs.size(), 2u);  // sent by A, received by B: the same frame
  EXPECT_EQ(recs[0].frame, recs[1].frame);
}

TEST_F(PcapIoTest, AnUnwritablePathFailsWithItsErrno) {
  auto net = FakeNetwork::create();
  auto a = PcapIo::wrap(std::move(net->attach(kA).value()), dir + "/no/such/dir/trace.pcap");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ENOENT);
}

TEST(EthernetFrame, Ipv6CarriesAUdpChecksum) {
  FrameFields f;
  f.src = Endpoint{*IpAddr::parse("fd00::1"), 4791};
  f.dst = Endpoint{*IpAddr::parse("fd00::2"), 4791};
  f.tos = 0x02;
  const Bytes payload = {1, 2, 3, 4, 5};
  const std::span<const uint8_t> parts[] = {payload};
  const Bytes v = ethernet_frame(f, parts);
  ASSERT_EQ(v.size(), 14 + 40 + 8 + 5u);
  EXPECT_EQ(be16(&v[12]), 0x86dd);
  EXPECT_EQ(v[14] >> 4, 6);
  EXPECT_EQ((be16(&v[14]) >> 4) & 0xff, 0x02);  // traffic class
  EXPECT_EQ(be16(&v[18]), 8 + 5);
  EXPECT_EQ(v[20], 17);
  // The checksum over the pseudo-header and the datagram sums to 0xffff.
  uint32_t s = 0;
  for (size_t i = 22; i < 54; i += 2) s += be16(&v[i]);
  s += 17 + 13;
  for (size_t i = 54; i < v.size(); i += 2) s += i + 1 < v.size() ? be16(&v[i]) : uint32_t(v[i]) << 8;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  EXPECT_EQ(s, 0xffffu);
  EXPECT_NE(be16(&v[60]), 0);
}

}  // namespace
}  // namespace uroce::net
