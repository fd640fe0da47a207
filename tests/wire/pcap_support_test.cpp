// tests/support: pcap reader/writer and hex helpers that the wire tests
// (and later the transport tests) rely on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "support/hex.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "wire/packet.hpp"

namespace uroce::test {
namespace {

std::string temp_path(const char* tag) {
  return ::testing::TempDir() + "uroce_" + tag + "_" + std::to_string(::getpid()) + ".pcap";
}

TEST(wire_support_hex, RoundTripAndRejects) {
  const std::vector<uint8_t> b = {0x00, 0x7f, 0x80, 0xff, 0x0a};
  EXPECT_EQ(to_hex(b), "007f80ff0a");
  EXPECT_EQ(from_hex("00 7F:80-ff\n0a"), b);
  EXPECT_THROW(from_hex("0g"), std::invalid_argument);
  EXPECT_THROW(from_hex("abc"), std::invalid_argument);
}

TEST(wire_support_pcap, WritesAndReadsBackRawAndEthernet) {
  std::mt19937_64 rng(9);
  wire::IpUdpFields v4, v6;
  v4.src = v4.dst = IpAddr::from_v4(0x7f000001);
  v6.src = v6.dst = *IpAddr::parse("::1");
  std::vector<std::vector<uint8_t>> packets;
  for (const auto* f : {&v4, &v6, &v4}) {
    const auto udp = make_udp_payload(random_headers(0x04, rng), random_bytes(40, rng), *f);
    packets.push_back(make_ip_packet(*f, {}, udp));
  }
  for (uint32_t lt : {kLinktypeRaw, kLinktypeEthernet}) {
    const std::string path = temp_path(lt == kLinktypeRaw ? "raw" : "eth");
    {
      auto w = PcapWriter::create(path, lt);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      for (const auto& p : packets) ASSERT_TRUE(w->write_ip(p).ok());
      ASSERT_TRUE(w->close().ok());
    }
    auto file = read_pcap(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ(file->linktype, lt);
    ASSERT_EQ(file->frames.size(), packets.size());
    const auto roce = roce_frames(*file);
    ASSERT_EQ(roce.size(), packets.size());
    for (size_t i = 0; i < packets.size(); ++i) {
      const auto l3 = strip_link(lt, file->frames[i].data);
      ASSERT_TRUE(l3);
      EXPECT_EQ(to_hex(*l3), to_hex(packets[i]));
      EXPECT_EQ(wire::verify_icrc(roce[i].ip.fields, roce[i].payload()), wire::IcrcCheck::ok);
    }
    std::remove(path.c_str());
  }
}

TEST(wire_support_pcap, StripsVlanSllAndLoopbackHeaders) {
  const std::vector<uint8_t> ip = {0x45, 0, 0, 20};
  std::vector<uint8_t> vlan = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0x00, 0x05, 0x08, 0x00};
  vlan.insert(vlan.end(), ip.begin(), ip.end());
  auto l3 = strip_link(kLinktypeEthernet, vlan);
  ASSERT_TRUE(l3);
  EXPECT_EQ(to_hex(*l3), "45000014");

  std::vector<uint8_t> sll(16, 0);
  sll[14] = 0x86;
  sll[15] = 0xdd;
  sll.push_back(0x60);
  l3 = strip_link(kLinktypeSll, sll);
  ASSERT_TRUE(l3);
  EXPECT_EQ(l3->size(), 1u);

  std::vector<uint8_t> arp = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1};
  EXPECT_FALSE(strip_link(kLinktypeEthernet, arp));
  EXPECT_FALSE(strip_link(kLinktypeEthernet, std::span(arp).first(13)));
  EXPECT_FALSE(strip_link(147, arp));  // a user link type
}

TEST(wire_support_pcap, RefusesMissingTruncatedAndPcapng) {
  EXPECT_FALSE(read_pcap("/nonexistent/x.pcap").ok());
  const std::string path = temp_path("trunc");
  auto bytes = [&](const std::vector<uint8_t>& b) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  };
  {
    auto w = PcapWriter::create(path, kLinktypeRaw);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write_ip(std::vector<uint8_t>(30, 0x45)).ok());
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> whole{std::istreambuf_iterator<char>(in), {}};
  ASSERT_EQ(whole.size(), 24u + 16u + 30u);
  bytes(std::vector<uint8_t>(whole.begin(), whole.end() - 1));  // last record cut
  EXPECT_FALSE(read_pcap(path).ok());
  bytes(std::vector<uint8_t>(whole.begin(), whole.begin() + 30));  // record header cut
  EXPECT_FALSE(read_pcap(path).ok());
  bytes({0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(read_pcap(path).status().code(), EOPNOTSUPP);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace uroce::test
