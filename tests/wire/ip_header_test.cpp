// wire/ip_header.hpp: IPv4/IPv6 + UDP headers built byte-exact against the
// vectors, UDP checksums, the UD GRH area, and a parser that refuses junk.
#include "wire/ip_header.hpp"

#include <gtest/gtest.h>

#include <array>

#include "support/hex.hpp"
#include "support/vectors.hpp"
#include "wire/bytes.hpp"

namespace uroce::wire {
namespace {

using test::to_hex;

std::vector<test::Vector> vectors() {
  auto v = test::read_vectors(UROCE_TEST_DATA "/vectors.txt");
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return v.ok() ? *v : std::vector<test::Vector>{};
}

// The vectors' headers, rebuilt from their fields.
TEST(wire_ip_header, RebuildsEveryVectorsHeaderExactly) {
  const auto vs = vectors();
  ASSERT_EQ(vs.size(), 6u);
  for (const auto& v : vs) {
    SCOPED_TRACE(v.name);
    const auto p = parse_ip_udp(v.bytes);
    ASSERT_TRUE(p);
    std::array<uint8_t, 48> hdr{};
    const size_t n = write_ip_udp_header(p->fields, p->variant, p->udp_payload.size(), hdr);
    ASSERT_EQ(n, p->ip_header_len + kUdpHeaderLen);
    // All but the UDP checksum, which the builder leaves 0.
    EXPECT_EQ(to_hex(std::span(hdr).first(n - 2)), to_hex(std::span(v.bytes).first(n - 2)));
    EXPECT_EQ(load_be16(hdr.data() + n - 2), 0);
  }
}

TEST(wire_ip_header, ParsesTheVectorsFields) {
  const auto vs = vectors();
  ASSERT_EQ(vs.size(), 6u);
  const auto v4 = parse_ip_udp(vs[3].bytes);  // the ConnectX-4 Lx CNP
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->fields.src.to_string(), "10.0.17.1");
  EXPECT_EQ(v4->fields.dst.to_string(), "10.0.18.1");
  EXPECT_EQ(v4->fields.src_port, 0);
  EXPECT_EQ(v4->fields.dst_port, kRoceUdpPort);
  EXPECT_EQ(v4->fields.ipv4_id, 0x718c);
  EXPECT_EQ(v4->fields.ipv4_frag, kIpv4DontFragment);
  EXPECT_EQ(v4->variant.tos, 0xc2);  // DSCP 48, ECN 10 (ECT(0))
  EXPECT_EQ(v4->variant.ttl, 64);
  EXPECT_EQ(v4->ip_checksum, 0x9161);
  EXPECT_EQ(v4->udp_checksum, 0);
  EXPECT_EQ(v4->udp_payload.size(), 32u);

  const auto v6 = parse_ip_udp(vs[5].bytes);
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->fields.src.to_string(), "::1");
  EXPECT_EQ(v6->variant.tos, 0x1a);
  EXPECT_EQ(v6->variant.flow_label, 0x12345u);
  EXPECT_EQ(v6->variant.ttl, 64);
  EXPECT_EQ(v6->ip_header_len, 40u);
  EXPECT_EQ(v6->udp_checksum, 0x89ae);
  EXPECT_EQ(v6->udp_payload.size(), 48u);
}

TEST(wire_ip_header, ChecksumsMatchTheVectors) {
  const auto vs = vectors();
  ASSERT_EQ(vs.size(), 6u);
  // V1, V2, V3 and V6 carry a real UDP checksum; V4 and V5 carry 0.
  for (size_t i : {0, 1, 2, 5}) {
    const auto p = parse_ip_udp(vs[i].bytes);
    ASSERT_TRUE(p);
    std::vector<uint8_t> udp(p->udp_datagram.begin(), p->udp_datagram.end());
    udp[6] = udp[7] = 0;
    EXPECT_EQ(udp_checksum(p->fields, udp), p->udp_checksum) << vs[i].name;
  }
  for (const auto& v : vs) {
    if (v.bytes[0] >> 4 != 4) continue;
    EXPECT_EQ(ipv4_header_checksum(std::span(v.bytes).first(20)), 0) << v.name;  // verifies
  }
}

IpUdpFields fields(bool v4) {
  IpUdpFields f;
  f.src = v4 ? IpAddr::from_v4(0x0a000001) : *IpAddr::parse("2001:db8::1");
  f.dst = v4 ? IpAddr::from_v4(0x0a000002) : *IpAddr::parse("2001:db8::2");
  f.src_port = 0xc123;
  f.ipv4_id = 0xbeef;
  return f;
}

TEST(wire_ip_header, GrhAreaOfUdReceives) {
  std::array<uint8_t, kGrhLen> grh;
  grh.fill(0xcc);
  const IpVariantFields var{.tos = 0x02, .ttl = 63, .flow_label = 0x54321};
  write_grh(fields(true), var, 100, grh);
  EXPECT_EQ(to_hex(std::span(grh).first(20)), std::string(40, '0'));  // bytes 0..19 zero
  EXPECT_EQ(to_hex(std::span(grh).subspan(20)),
            "45020080"
            "beef4000"
            "3f11" +
                to_hex(std::span(grh).subspan(30, 2)) +
                "0a000001"
                "0a000002");
  EXPECT_EQ(ipv4_header_checksum(std::span(grh).subspan(20)), 0);
  EXPECT_EQ(load_be16(grh.data() + 22), 20 + 8 + 100);

  write_grh(fields(false), var, 100, grh);
  EXPECT_EQ(to_hex(std::span(grh).first(8)),
            "60254321"
            "006c"
            "113f");
  EXPECT_EQ(to_hex(std::span(grh).subspan(8, 16)), "20010db8000000000000000000000001");
  EXPECT_EQ(to_hex(std::span(grh).subspan(24, 16)), "20010db8000000000000000000000002");
}

TEST(wire_ip_header, WriteRefusesShortBuffer) {
  std::array<uint8_t, 47> b{};
  EXPECT_EQ(write_ip_udp_header(fields(false), {}, 10, b), 0u);
  EXPECT_EQ(write_ip_udp_header(fields(true), {}, 10, std::span(b).first(27)), 0u);
  EXPECT_EQ(write_ip_udp_header(fields(true), {}, 10, std::span(b).first(28)), 28u);
  EXPECT_EQ(write_ip_header(fields(true), {}, 10, std::span(b).first(19)), 0u);
}

std::vector<uint8_t> packet(bool v4, size_t udp_payload_len) {
  std::vector<uint8_t> b(48 + udp_payload_len, 0x5a);
  const size_t n = write_ip_udp_header(fields(v4), {}, udp_payload_len, b);
  b.resize(n + udp_payload_len);
  return b;
}

TEST(wire_ip_header, ParseTrimsLinkPaddingAndRoundTrips) {
  for (bool v4 : {true, false}) {
    auto b = packet(v4, 6);
    b.insert(b.end(), 20, 0xee);  // Ethernet minimum-frame padding
    const auto p = parse_ip_udp(b);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->fields.src, fields(v4).src);
    EXPECT_EQ(p->fields.src_port, 0xc123);
    EXPECT_EQ(p->fields.ipv4_id, v4 ? 0xbeef : 0);
    EXPECT_EQ(p->udp_payload.size(), 6u);
    EXPECT_EQ(p->udp_payload[0], 0x5a);
    EXPECT_EQ(p->udp_datagram.size(), 14u);
  }
}

TEST(wire_ip_header, ParseRefusesMalformed) {
  for (bool v4 : {true, false}) {
    const auto good = packet(v4, 16);
    ASSERT_TRUE(parse_ip_udp(good));
    for (size_t n = 0; n < good.size(); ++n) {  // every truncation: lengths no longer fit
      std::vector<uint8_t> cut(good.begin(), good.begin() + long(n));
      EXPECT_FALSE(parse_ip_udp(cut)) << n;
    }
    auto proto = good;
    proto[v4 ? 9 : 6] = 6;  // TCP
    EXPECT_FALSE(parse_ip_udp(proto));
    auto ver = good;
    ver[0] = uint8_t((5 << 4) | (ver[0] & 0xf));
    EXPECT_FALSE(parse_ip_udp(ver));
    auto ulen = good;
    const size_t u = v4 ? 20 : 40;
    store_be16(ulen.data() + u + 4, uint16_t(8 + 17));  // longer than the IP packet
    EXPECT_FALSE(parse_ip_udp(ulen));
    store_be16(ulen.data() + u + 4, 7);  // shorter than a UDP header
    EXPECT_FALSE(parse_ip_udp(ulen));
  }
  auto frag = packet(true, 16);
  store_be16(frag.data() + 6, 0x2000);  // MF: a first fragment
  EXPECT_FALSE(parse_ip_udp(frag));
  store_be16(frag.data() + 6, 0x0001);  // offset 8
  EXPECT_FALSE(parse_ip_udp(frag));
  auto ihl = packet(true, 16);
  ihl[0] = 0x44;  // IHL 4 < 5
  EXPECT_FALSE(parse_ip_udp(ihl));
}

}  // namespace
}  // namespace uroce::wire
