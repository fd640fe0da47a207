// wire/icrc.hpp and wire/crc32.hpp: the CRC-32 convention, the GF(2)
// arithmetic, what the ICRC covers, incremental == one-shot, IPv6 verify.
#include "wire/icrc.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string_view>

#include "support/hex.hpp"
#include "support/roce_packet.hpp"
#include "wire/bytes.hpp"
#include "wire/crc32.hpp"
#include "wire/opcode.hpp"
#include "wire/packet.hpp"

#ifdef UROCE_HAVE_ZLIB
#include <zlib.h>
#endif

namespace uroce::wire {
namespace {

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(wire_icrc, Crc32IsIeeeWithZlibConvention) {
  EXPECT_EQ(crc32::update(0, as_bytes("123456789")), 0xcbf43926u);  // the CRC-32 check value
  EXPECT_EQ(crc32::update(0, {}), 0u);
  // Chaining: crc(a || b) == update(update(0, a), b).
  EXPECT_EQ(crc32::update(crc32::update(0, as_bytes("1234")), as_bytes("56789")), 0xcbf43926u);
}

#ifdef UROCE_HAVE_ZLIB
TEST(wire_icrc, Crc32AgreesWithZlibIncludingChaining) {
  std::mt19937_64 rng(42);
  for (size_t len : {0, 1, 3, 7, 8, 15, 16, 31, 63, 64, 65, 127, 255, 256, 1000, 4096, 4133}) {
    const auto b = test::random_bytes(len, rng);
    const uint32_t z = uint32_t(::crc32(0, b.data(), uInt(b.size())));
    EXPECT_EQ(crc32::update(0, b), z) << len;
    const size_t cut = len ? rng() % len : 0;
    const uint32_t part = crc32::update(0, std::span(b).first(cut));
    EXPECT_EQ(crc32::update(part, std::span(b).subspan(cut)), z) << len << " cut " << cut;
    // A non-zero start value is continued exactly as zlib does (zlib
    // answers 0 for a null buffer, so only with data).
    if (len > 0) {
      EXPECT_EQ(crc32::update(0x12345678, b), uint32_t(::crc32(0x12345678, b.data(), uInt(len))));
    }
  }
}
#endif

TEST(wire_icrc, Gf2Arithmetic) {
  EXPECT_EQ(crc32::x_pow(0), crc32::kOne);
  EXPECT_EQ(crc32::x_pow(1), crc32::kX);
  EXPECT_EQ(crc32::x_pow(31), 1u);
  EXPECT_EQ(crc32::x_pow(32), crc32::kPoly);  // x^32 = P - x^32 (mod P)
  EXPECT_EQ(crc32::mul(crc32::kX, crc32::kXInv), crc32::kOne);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const uint64_t n = rng() % 100000;
    const uint32_t a = uint32_t(rng()), b = uint32_t(rng());
    EXPECT_EQ(crc32::mul(crc32::x_pow(n), crc32::x_pow_neg(n)), crc32::kOne) << n;
    EXPECT_EQ(crc32::mul(a, b), crc32::mul(b, a));
    EXPECT_EQ(crc32::mul(a, crc32::kOne), a);
    EXPECT_EQ(crc32::x_pow(n + 5), crc32::mul(crc32::x_pow(n), crc32::x_pow(5)));
  }
}

// The fact verify_icrc relies on: two equal-length messages differing in 4
// bytes F at offset o have CRCs that differ by F(x) * x^(8k + 32), k the
// bytes after F, with F read little-endian in the reflected representation.
TEST(wire_icrc, CrcDifferenceIsLinearInTheChangedBytes) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100; ++i) {
    const size_t len = 4 + rng() % 200, o = rng() % (len - 3);
    auto a = test::random_bytes(len, rng);
    auto b = a;
    const uint32_t f = uint32_t(rng());
    uint8_t fb[4];
    store_le32(fb, f);
    for (int j = 0; j < 4; ++j) b[o + j] ^= fb[j];
    const uint32_t diff = crc32::update(0, a) ^ crc32::update(0, b);
    EXPECT_EQ(diff, crc32::mul(f, crc32::x_pow(8 * (len - o - 4) + 32)));
    EXPECT_EQ(crc32::mul(diff, crc32::x_pow_neg(8 * (len - o - 4) + 32)), f);
  }
}

IpUdpFields v4_fields() {
  IpUdpFields f;
  f.src = IpAddr::from_v4(0xc0a80101);
  f.dst = IpAddr::from_v4(0xc0a80102);
  f.src_port = 0xc000;
  f.ipv4_id = 0x0001;
  return f;
}

TEST(wire_icrc, PutAndGetAreLeastSignificantByteFirst) {
  uint8_t b[4];
  put_icrc(0x0aa73e23, b);
  EXPECT_EQ(b[0], 0x23);
  EXPECT_EQ(b[1], 0x3e);
  EXPECT_EQ(b[2], 0xa7);
  EXPECT_EQ(b[3], 0x0a);
  EXPECT_EQ(get_icrc(b), 0x0aa73e23u);
}

TEST(wire_icrc, IncrementalEqualsOneShotAtEverySplit) {
  std::mt19937_64 rng(3);
  Headers h = test::random_headers(0x0b, rng);  // RC_WRITE_ONLY_IMM: 32 header bytes
  const auto pkt = test::make_udp_payload(h, test::random_bytes(61, rng), v4_fields());
  const auto body = std::span(pkt).subspan(kBthLen, pkt.size() - kBthLen - kIcrcLen);
  const uint32_t want = compute_icrc(v4_fields(), pkt);
  EXPECT_EQ(want, get_icrc(pkt.data() + pkt.size() - 4));
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    Icrc c(v4_fields(), pkt.size(), std::span(pkt).first<12>());
    c.update(body.first(cut));
    c.update(body.subspan(cut));
    ASSERT_EQ(c.value(), want) << cut;
  }
}

// The ICRC input spelled out by hand (IPv4), for a reference computed in one
// plain CRC call.
std::vector<uint8_t> masked_input_v4(const IpUdpFields& f, std::span<const uint8_t> udp_payload) {
  const size_t udp_len = 8 + udp_payload.size();
  std::vector<uint8_t> in(8, 0xff);
  const uint8_t ip[20] = {0x45,
                          0xff,
                          uint8_t((20 + udp_len) >> 8),
                          uint8_t(20 + udp_len),
                          uint8_t(f.ipv4_id >> 8),
                          uint8_t(f.ipv4_id),
                          uint8_t(f.ipv4_frag >> 8),
                          uint8_t(f.ipv4_frag),
                          0xff,
                          17,
                          0xff,
                          0xff,
                          0xc0,
                          0xa8,
                          0x01,
                          0x01,
                          0xc0,
                          0xa8,
                          0x01,
                          0x02};
  in.insert(in.end(), ip, ip + 20);
  const uint8_t udp[8] = {uint8_t(f.src_port >> 8),
                          uint8_t(f.src_port),
                          uint8_t(f.dst_port >> 8),
                          uint8_t(f.dst_port),
                          uint8_t(udp_len >> 8),
                          uint8_t(udp_len),
                          0xff,
                          0xff};
  in.insert(in.end(), udp, udp + 8);
  in.insert(in.end(), udp_payload.begin(), udp_payload.end() - kIcrcLen);
  in[8 + 20 + 8 + 4] = 0xff;  // BTH byte 4
  return in;
}

// Pieces of every size, small ones gathered and large ones run through
// directly, in every mix, give the CRC of the whole input.
TEST(wire_icrc, PiecesOfEverySizeAgreeWithOnePlainCrc) {
  std::mt19937_64 rng(11);
  for (size_t body_len = 0; body_len <= 4200; body_len += body_len < 420 ? 1 : 97) {
    std::vector<uint8_t> pkt = test::random_bytes(kBthLen + body_len + kIcrcLen, rng);
    const uint32_t want = crc32::update(0, masked_input_v4(v4_fields(), pkt));
    ASSERT_EQ(compute_icrc(v4_fields(), pkt), want) << body_len;
    const auto body = std::span<const uint8_t>(pkt).subspan(kBthLen, body_len);
    Icrc c(v4_fields(), pkt.size(), std::span<const uint8_t>(pkt).first<12>());
    for (size_t at = 0; at < body.size();) {
      const size_t piece = std::min<size_t>(body.size() - at, rng() % 3 == 0 ? rng() % 600 : rng() % 40);
      c.update(body.subspan(at, piece));
      at += piece;
    }
    ASSERT_EQ(c.value(), want) << body_len;
  }
}

TEST(wire_icrc, BthByte4IsNotCovered) {
  std::mt19937_64 rng(5);
  auto pkt = test::make_udp_payload(test::random_headers(0x04, rng), test::random_bytes(8, rng), v4_fields());
  const uint32_t icrc = compute_icrc(v4_fields(), pkt);
  for (int v = 0; v < 256; ++v) {  // FECN, BECN, Resv6
    pkt[4] = uint8_t(v);
    EXPECT_EQ(compute_icrc(v4_fields(), pkt), icrc);
  }
}

TEST(wire_icrc, EveryOtherFieldIsCovered) {
  std::mt19937_64 rng(6);
  const auto pkt = test::make_udp_payload(test::random_headers(0x64, rng), test::random_bytes(8, rng), v4_fields());
  const uint32_t icrc = compute_icrc(v4_fields(), pkt);
  auto changed = [&](auto mutate) {
    IpUdpFields f = v4_fields();
    mutate(f);
    return compute_icrc(f, pkt) != icrc;
  };
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.src = IpAddr::from_v4(0xc0a80103); }));
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.dst = IpAddr::from_v4(0xc0a80103); }));
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.src_port = 0xc001; }));
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.dst_port = 4790; }));
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.ipv4_id = 2; }));
  EXPECT_TRUE(changed([](IpUdpFields& f) { f.ipv4_frag = 0; }));
  for (size_t i = 0; i + kIcrcLen < pkt.size(); ++i) {
    if (i == 4) continue;
    auto m = pkt;
    m[i] ^= 0x01;
    EXPECT_NE(compute_icrc(v4_fields(), m), icrc) << "byte " << i;
  }
  // The ICRC bytes themselves are not input.
  auto m = pkt;
  m.back() ^= 0xff;
  EXPECT_EQ(compute_icrc(v4_fields(), m), icrc);
}

TEST(wire_icrc, Ipv6VerifiesOkOrBadOnly) {
  IpUdpFields f;
  f.src = *IpAddr::parse("fe80::1");
  f.dst = *IpAddr::parse("fe80::2");
  f.src_port = 0xc000;
  std::mt19937_64 rng(8);
  const auto pkt = test::make_udp_payload(test::random_headers(0x00, rng), test::random_bytes(16, rng), f);
  uint16_t id = 0x7777;
  EXPECT_EQ(verify_icrc(f, pkt, &id), IcrcCheck::ok);
  EXPECT_EQ(id, 0x7777);  // no ID over IPv6: untouched
  for (size_t bit = 0; bit < pkt.size() * 8; ++bit) {
    if (bit / 8 == 4) continue;  // BTH byte 4 is masked
    auto m = pkt;
    m[bit / 8] ^= uint8_t(1u << (bit % 8));
    ASSERT_EQ(verify_icrc(f, m, &id), IcrcCheck::bad) << bit;
  }
  EXPECT_EQ(id, 0x7777);
}

TEST(wire_icrc, TooShortIsBad) {
  std::vector<uint8_t> p(15, 0);
  EXPECT_EQ(verify_icrc(v4_fields(), p), IcrcCheck::bad);
  EXPECT_EQ(verify_icrc(v4_fields(), {}), IcrcCheck::bad);
}

}  // namespace
}  // namespace uroce::wire

namespace uroce::wire {
namespace {

// The CNP a ConnectX sends, as NVIDIA's "RoCEv2 CNP packet format example"
// publishes it: 22.22.22.8 -> 22.22.22.7, IP ID 0x98c6, DF, UDP 56238 ->
// 4791, BTH opcode 0x81 with BECN for QP 0xd2, 16 reserved bytes, ICRC
// da fc 1b ef.  Our encoder and ICRC produce those bytes.
TEST(wire_icrc, PublishedConnectXCnpExample) {
  Headers h;
  h.bth.opcode = uint8_t(Opcode::cnp);
  h.bth.becn = true;
  h.bth.dest_qp = 0xd2;
  std::vector<uint8_t> b(udp_payload_len(info(Opcode::cnp), 0));
  ASSERT_EQ(b.size(), 32u);
  ASSERT_EQ(encode_headers(h, b), 28u);
  IpUdpFields ip;
  ip.src = *IpAddr::parse("22.22.22.8");
  ip.dst = *IpAddr::parse("22.22.22.7");
  ip.src_port = 56238;
  ip.ipv4_id = 0x98c6;
  put_icrc(compute_icrc(ip, b), &b[28]);
  EXPECT_EQ(test::to_hex(b),
            "8100ffff400000d200000000"
            "00000000000000000000000000000000"
            "dafc1bef");
}

}  // namespace
}  // namespace uroce::wire
