// Truncation and mutation fuzz: decode() on every prefix of valid packets
// gives exactly the expected verdict and never reads past the buffer (each
// prefix is copied into a heap buffer of exactly its size, so ASan builds
// catch any overread).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

// Packets to cut up: suite.pcap (every opcode rxe and ConnectX use) plus a
// random one of every opcode in the table.
std::vector<std::vector<uint8_t>> corpus() {
  std::vector<std::vector<uint8_t>> out;
  auto file = test::read_pcap(UROCE_TEST_DATA "/suite.pcap");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  if (file.ok())
    for (const auto& f : test::roce_frames(*file)) out.emplace_back(f.payload().begin(), f.payload().end());
  std::mt19937_64 rng(0x7c0de);
  IpUdpFields ip;
  ip.src = ip.dst = IpAddr::from_v4(0x7f000001);
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& oi = info(uint8_t(op));
    if (!oi.valid()) continue;
    const size_t len = oi.has(op::kPayload) ? 1 + rng() % 70 : 0;
    out.push_back(test::make_udp_payload(test::random_headers(uint8_t(op), rng), test::random_bytes(len, rng), ip));
  }
  return out;
}

// What decode() must say about the first `n` bytes of valid packet `full`.
bool expect_ok(std::span<const uint8_t> full, size_t n, DecodeError& want) {
  const OpcodeInfo& oi = info(full[0]);
  const size_t pad = (full[1] >> 4) & 3;
  if (n < kBthLen + kIcrcLen || n < oi.header_len + kIcrcLen) {
    want = DecodeError::truncated;
    return false;
  }
  const size_t data = n - oi.header_len - kIcrcLen;  // prefixes never exceed a payload-less packet
  if (data % 4 != 0 || pad > data) {
    want = DecodeError::bad_pad;
    return false;
  }
  return true;
}

TEST(wire_truncation, EveryPrefixOfEveryValidPacket) {
  const auto packets = corpus();
  ASSERT_EQ(packets.size(), 31u + 67u);
  size_t prefixes = 0, accepted = 0;
  for (const auto& full : packets) {
    for (size_t n = 0; n <= full.size(); ++n) {
      auto buf = std::make_unique<uint8_t[]>(n ? n : 1);  // exactly n bytes to read
      std::copy(full.begin(), full.begin() + long(n), buf.get());
      const std::span<const uint8_t> prefix(buf.get(), n);
      Packet p;
      DecodeError err{};
      DecodeError want{};
      const bool ok = decode(prefix, p, err);
      ASSERT_EQ(ok, expect_ok(full, n, want)) << info(full[0]).name << " prefix " << n;
      ++prefixes;
      if (!ok) {
        EXPECT_EQ(err, want) << info(full[0]).name << " prefix " << n;
        continue;
      }
      ++accepted;
      EXPECT_GE(p.payload.data(), prefix.data());
      EXPECT_LE(p.payload.data() + p.payload.size(), prefix.data() + n - kIcrcLen);
    }
    Packet p;
    DecodeError err{};
    EXPECT_TRUE(decode(full, p, err)) << "the whole packet decodes";
  }
  EXPECT_GT(prefixes, 3000u);
  EXPECT_GE(accepted, packets.size());
}

TEST(wire_truncation, RandomByteMutationsStayInBounds) {
  // Decoding garbage never crashes, and whatever it accepts is consistent
  // with the table.
  const auto packets = corpus();
  std::mt19937_64 rng(0xf022);
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> b = packets[rng() % packets.size()];
    for (int k = 0, m = 1 + int(rng() % 4); k < m; ++k) b[rng() % b.size()] ^= uint8_t(rng());
    if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
    auto buf = std::make_unique<uint8_t[]>(b.size() + 1);
    std::copy(b.begin(), b.end(), buf.get());
    Packet p;
    DecodeError err{};
    if (!decode(std::span<const uint8_t>(buf.get(), b.size()), p, err)) continue;
    ++accepted;
    ASSERT_TRUE(p.info->valid());
    EXPECT_EQ(p.hdr.bth.opcode, b[0]);
    EXPECT_EQ(p.payload.size() + p.hdr.bth.pad + p.info->header_len + kIcrcLen, b.size());
  }
  EXPECT_GT(accepted, 1000u);  // the fuzz reached the accepting paths too
}

}  // namespace
}  // namespace uroce::wire
